"""The dashboard's pure parts, without a server: the same-origin rule, credentials,
where an action may return to, the URL prefix, the rates from samples, the plots
and the filters the templates use."""

from __future__ import annotations

import base64
import re

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from runtime.dashboard import plots, render, tracebacks
from runtime.dashboard.actions import back_to
from runtime.dashboard.app import normal_prefix
from runtime.dashboard.live import Rates, progress_text, throughput_plot
from runtime.dashboard.security import Credentials, host_name, is_loopback, same_origin
from runtime.errors import BadArgument
from runtime.queue.stats import Throughput

HOST = "127.0.0.1:8008"


@pytest.mark.parametrize(
    ("method", "origin", "fetch_site", "allowed"),
    [
        ("GET", None, None, True),
        ("HEAD", "http://evil.example", "cross-site", True),
        ("POST", None, None, False),
        ("POST", "http://127.0.0.1:8008", None, True),
        ("POST", "HTTP://127.0.0.1:8008", None, True),
        ("POST", "http://127.0.0.1:8009", None, False),
        ("POST", "https://127.0.0.1:8008", None, False),
        ("POST", "http://localhost:8008", None, False),
        ("POST", "null", None, False),
        ("POST", "http://127.0.0.1:notaport", None, False),
        ("POST", None, "same-origin", True),
        ("POST", "http://127.0.0.1:8008", "same-site", False),
        ("POST", "http://127.0.0.1:8008", "none", False),
        ("DELETE", None, None, False),
    ],
)
def test_only_same_origin_requests_may_change_something(
    method: str, origin: str | None, fetch_site: str | None, allowed: bool
) -> None:
    assert same_origin(method, "http", HOST, origin, fetch_site) is allowed


def test_the_default_ports_count_as_given() -> None:
    assert same_origin("POST", "http", "example.org", "http://example.org:80", None)
    assert same_origin("POST", "https", "example.org:443", "https://example.org", None)


def test_credentials_are_compared_whole() -> None:
    creds = Credentials.parse("op:pa:ss")
    assert creds == Credentials("op", "pa:ss")

    def header(text: str) -> str:
        return "Basic " + base64.b64encode(text.encode()).decode()

    assert creds.accepts(header("op:pa:ss"))
    assert not creds.accepts(header("op:pa"))
    assert not creds.accepts(header("op:pa:ss "))
    assert not creds.accepts("Bearer x")
    assert not creds.accepts("Basic !!!")
    assert not creds.accepts(None)
    for bad in ("op", ":pw", "op:", ""):
        with pytest.raises(ValueError, match="user:password"):
            Credentials.parse(bad)


def test_loopback_names_are_known() -> None:
    assert [host_name(h) for h in ("127.0.0.1:8008", "[::1]:80", "localhost", "::1")] == [
        "127.0.0.1",
        "::1",
        "localhost",
        "::1",
    ]
    assert all(map(is_loopback, ("127.0.0.1", "127.1.2.3", "::1", "localhost", "a.localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "10.0.0.1", "example.org", "")))


def test_an_action_returns_only_within_the_dashboard() -> None:
    assert back_to("", "/queue?name=a") == "/queue?name=a"
    assert back_to("/ops", "/ops/job?jid=x") == "/ops/job?jid=x"
    for target in (None, "", "http://evil/", "//evil/", "/\\evil", "/other", "javascript:1"):
        assert back_to("/ops", target) == "/ops/"


def test_a_url_prefix_is_one_plain_path() -> None:
    assert [normal_prefix(p) for p in ("", "/", "ops", "/ops/", "/a/b")] == [
        "",
        "",
        "/ops",
        "/ops",
        "/a/b",
    ]
    for bad in ("/a b", "/a?b", "/a#b", "/a%2f"):
        with pytest.raises(BadArgument):
            normal_prefix(bad)


def test_rates_are_differences_of_the_totals_over_time() -> None:
    rates = Rates(interval_s=1.0)
    assert rates.per_second() == (None, None)
    for second in range(21):
        rates.add(complete=10 * second, failed=second // 2, at_s=1000.0 + second)
    complete, failed = rates.per_second()
    assert complete == pytest.approx(10.0)
    assert failed == pytest.approx(0.5)
    rates.add(complete=0, failed=0, at_s=1021.0)  # a counter that went back counts as none
    assert rates.per_second()[0] == 0.0


def test_the_hour_plot_is_steps_of_the_minutes_counted_in_redis() -> None:
    from_ms = 1_800_000_000_000
    seen = Throughput(
        now_ms=from_ms + 60 * 60_000 + 30_000,  # half way through the 61st minute
        from_ms=from_ms,
        completed=(120,) * 60 + (40,),
        failed=(0,) * 59 + (6, 1),
    )
    chart = throughput_plot(seen)
    lines = dict(re.findall(r'<polyline class="line (s-\w+)" points="([^"]*)"', chart))
    done = [tuple(map(float, p.split(","))) for p in lines["s-complete"].split()]
    assert len(done) == 2 * 61  # the first minute began before the hour: cut at its start
    xs = [x for x, _ in done]
    assert xs == sorted(xs) and xs[0] == plots.LEFT and xs[-1] == plots.LINE_SIZE[0] - plots.RIGHT
    assert done[-1][1] > done[0][1]  # the current minute, still counting, is lower
    assert "completed/min" in chart and "200/min" in chart  # axis: the next nice number
    failed = [float(p.split(",")[1]) for p in lines["s-failed"].split()]
    assert len(set(failed)) == 3


def test_plots_are_svg_with_every_text_escaped() -> None:
    chart = plots.line_chart(
        [plots.Series("<b>", "s-complete", [(-60.0, 1.0), (0.0, 3.0)])],
        (-60.0, 0.0),
        [(-60.0, "-1 min"), (0.0, "now")],
        "a <title>",
        "/s",
    )
    assert chart.startswith('<svg class="plot lines"')
    assert "<b>" not in chart and "&lt;b&gt;" in chart and "a &lt;title&gt;" in chart
    assert "5/s" in chart  # the axis ends at the next nice number above the peak
    bars = plots.bar_chart([(plots.seconds_label(s), n) for s, n in ((0.005, 3), (1, 1))], "t")
    assert bars.startswith('<svg class="plot bars"') and bars.count('<rect class="bar"') == 2
    assert ">5 ms<" in bars and ">1 s<" in bars
    assert "no data" in plots.bar_chart([], "t")


@pytest.mark.parametrize(
    ("value", "top"), [(0, 1), (0.3, 0.5), (1, 1), (7, 10), (12, 20), (4500, 5000)]
)
def test_an_axis_ends_at_a_nice_number(value: float, top: float) -> None:
    assert plots.nice_top(value) == pytest.approx(top)


def test_the_filters_read_as_a_person_would() -> None:
    duration = render.environment().filters["duration"]
    assert [duration(s) for s in (None, 0.25, 4.21, 190, 7500, 90000)] == [
        "-",
        "250 ms",
        "4.21 s",
        "3.2 min",
        "2.1 h",
        "1 d",
    ]
    assert render.number(1234567) == "1,234,567"
    assert render.number(2.25) == "2.2"
    assert render.number(None) == "-"
    assert render.when(0) == "1970-01-01 00:00:00Z"
    assert render.ago(1_000, 61_000) == "1 min ago"
    assert render.query(a="x y", b=None, c="") == "?a=x+y"
    assert progress_text({"done": 3, "total": 10, "message": "step 3"}) == "3 / 10 (30 %) step 3"
    assert progress_text(None) == "-"


def test_a_jobs_data_is_previewed_on_one_line() -> None:
    assert render.preview({"to": "a@b.c", "n": [1, 2]}) == '"to": "a@b.c", "n": [1, 2]'
    assert render.preview({"text": "two\nlines"}) == '"text": "two\\nlines"'
    assert render.preview([1, "x"]) == '[1, "x"]'
    assert render.preview({}) == ""


def test_runtimes_own_frames_are_told_apart_wherever_it_is_installed() -> None:
    site = "/srv/app/venv/lib/python3.12/site-packages/runtime"
    message = "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "{site}/children/child.py", line 218, in call',
            "    result = fn(context)",
            "             ^^^^^^^^^^^",
            f'  File "{site}/typed.py", line 138, in __call__',
            "    return self.__wrapped__(ctx, **kwargs)",
            '  File "/home/me/runtime/notes.py", line 3, in send',  # not one of its modules
            "    raise KeyError(key)",
            "KeyError: 'missing'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "C:\\app\\runtime\\children\\child.py", line 220, in call',
            "    raise Failed()",
            "Failed",
        ]
    )
    parts = tracebacks.parts(message)
    assert [p.frames for p in parts] == [0, 2, 0, 1, 0]
    assert "\n".join(p.text for p in parts) == message
    assert parts[1].text.startswith(f'  File "{site}/children/child.py"')
    assert parts[1].text.endswith("return self.__wrapped__(ctx, **kwargs)")
    assert parts[2].text.startswith('  File "/home/me/runtime/notes.py"')
    assert tracebacks.parts("plain message") == [tracebacks.Part("plain message", 0)]


def test_templates_escape_everything() -> None:
    env = render.environment()
    assert env.from_string("{{ x }}").render(x="<i>") == "&lt;i&gt;"
    assert env.autoescape is True
