"""The dashboard's guard, through a plain HTTP client against a real server: actions
only as same-origin POSTs, Host names checked on loopback, basic auth, escaping,
the headers every response carries, /metrics, the URL prefix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtime import Client
from tests.dashboard.conftest import Dashboard, serve

httpx: Any = pytest.importorskip("httpx", reason="httpx is not installed")
pytest.importorskip("starlette", reason="the dashboard extra is not installed")

REFUSED = "refused: not a same-origin request\n"


def paused(client: Client, queue: str) -> bool:
    return bool(client.status(queue)[queue]["paused"])


@pytest.fixture
def http(dashboard: Dashboard) -> Iterator[Any]:
    with httpx.Client(base_url=dashboard.url, follow_redirects=False, timeout=10) as session:
        yield session


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "https://127.0.0.1"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "SAME"},
        {"Referer": "SAME/queues"},
    ],
    ids=[
        "no-header",
        "other-site",
        "null-origin",
        "other-scheme-and-port",
        "cross-site",
        "same-site",
        "cross-site-wins",
        "referer-alone",
    ],
)
def test_a_post_without_a_same_origin_header_is_refused(
    dashboard: Dashboard, http: Any, headers: dict[str, str]
) -> None:
    dashboard.client.queue("guarded").put("tests.integration.jobs:noop")
    sent = {k: v.replace("SAME", dashboard.url) for k, v in headers.items()}
    answer = http.post("/action/pause", data={"queue": "guarded", "next": "/"}, headers=sent)
    assert (answer.status_code, answer.text) == (403, REFUSED)
    assert not paused(dashboard.client, "guarded")


def test_a_same_origin_post_acts_and_returns_to_its_page(dashboard: Dashboard, http: Any) -> None:
    client = dashboard.client
    client.queue("guarded").put("tests.integration.jobs:noop")
    form = {"queue": "guarded", "next": "/queue?name=guarded"}
    answer = http.post("/action/pause", data=form, headers={"Origin": dashboard.url})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/queue?name=guarded"
    assert "paused%20guarded" in answer.headers["set-cookie"]
    assert paused(client, "guarded")
    answer = http.post("/action/resume", data=form, headers={"Sec-Fetch-Site": "same-origin"})
    assert answer.status_code == 303
    assert not paused(client, "guarded")


def test_no_action_is_a_get(dashboard: Dashboard, http: Any) -> None:
    dashboard.client.queue("guarded").put("tests.integration.jobs:noop")
    answer = http.get("/action/pause", params={"queue": "guarded"})
    assert answer.status_code == 405
    assert not paused(dashboard.client, "guarded")


def test_an_action_returns_only_to_a_page_of_the_dashboard(dashboard: Dashboard, http: Any) -> None:
    dashboard.client.queue("guarded").put("tests.integration.jobs:noop")
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:x"):
        form = {"queue": "guarded", "next": target}
        answer = http.post("/action/pause", data=form, headers={"Origin": dashboard.url})
        assert answer.headers["location"] == "/", target


def test_a_refused_action_says_why_on_the_page_it_returns_to(
    dashboard: Dashboard, http: Any
) -> None:
    answer = http.post(
        "/action/retry",
        data={"jid": "nosuchjob", "next": "/failures"},
        headers={"Origin": dashboard.url},
    )
    assert answer.status_code == 303
    page = http.get("/failures")  # the session sends the cookie back
    assert "retry refused: " in page.text
    assert 'class="flash error"' in page.text


def test_a_host_name_that_is_not_loopback_is_refused(dashboard: Dashboard, http: Any) -> None:
    port = dashboard.url.rsplit(":", 1)[1]
    answer = http.get("/", headers={"Host": f"rebound.example:{port}"})
    assert (answer.status_code, answer.text.count("\n")) == (403, 1)
    for name in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert http.get("/", headers={"Host": name}).status_code == 200


def test_every_response_keeps_out_of_frames_and_other_origins(
    dashboard: Dashboard, http: Any
) -> None:
    for path in ("/", "/queues", "/live.json", "/static/style.css", "/nowhere"):
        headers = http.get(path).headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["x-content-type-options"] == "nosniff", path


def test_job_data_is_escaped_on_every_page(dashboard: Dashboard, http: Any) -> None:
    evil = "<script>alert(1)</script>"
    client = dashboard.client
    jid = client.queue("evil").put("tests.integration.jobs:noop", {"x": evil}, tags=[evil])
    for path, params in (
        ("/job", {"jid": jid}),
        ("/find", {"q": evil}),
        ("/queue", {"name": "evil"}),
        ("/queues", {}),
    ):
        text = http.get(path, params=params).text
        assert "<script>alert" not in text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in http.get("/job", params={"jid": jid}).text


def test_metrics_are_served_in_the_prometheus_format(dashboard: Dashboard, http: Any) -> None:
    dashboard.client.queue("scraped").put("tests.integration.jobs:noop")
    answer = http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    assert 'queue="scraped"' in answer.text


def test_metrics_serve_runtimes_a_registry_given_or_nothing(plain_client: Client) -> None:
    from prometheus_client import CollectorRegistry, Counter, generate_latest  # noqa: PLC0415

    from runtime.dashboard import create_app  # noqa: PLC0415

    plain_client.queue("scraped").put("tests.integration.jobs:noop")
    write, _ = create_app(plain_client).state.metrics
    assert b'runtime_jobs{queue="scraped",state="waiting"} 1.0\n' in write()
    registry = CollectorRegistry()
    Counter("mine", "my own counter", registry=registry).inc()
    write, _ = create_app(plain_client, registry=registry).state.metrics
    assert write() == generate_latest(registry)
    assert create_app(plain_client, registry=None).state.metrics is None


def test_basic_auth_and_a_url_prefix_guard_every_path(dashboard: Dashboard) -> None:
    from runtime.dashboard.security import Credentials  # noqa: PLC0415

    client = Client.from_url(dashboard.client.url, namespace=dashboard.client.keys.namespace)
    url, server, thread = serve(client, url_prefix="/ops", credentials=Credentials("op", "s:cret"))
    try:
        with httpx.Client(base_url=url.removesuffix("/ops"), timeout=10) as http:
            refused = http.get("/ops/")
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == 'Basic realm="runtime"'
            assert http.get("/ops/queues", auth=("op", "wrong")).status_code == 401
            assert http.get("/ops/queues", auth=("op", "s:cret")).status_code == 200
            assert http.get("/ops/metrics").status_code == 401
            page = http.get("/ops/", auth=("op", "s:cret")).text
            assert 'href="/ops/static/style.css"' in page
            assert 'action="/ops/find"' in page
            assert http.get("/queues", auth=("op", "s:cret")).status_code == 404
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        client.close()
