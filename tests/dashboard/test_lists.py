"""What tells rows apart, in Chromium at 1400 and 800 pixels: recurring jobs' jids
(which differ only after "<queue>/<klass>") are shown whole, a DependencyFailed
reason shows the jid it names, the failed tab says when each job failed, the
overview counts waiting, scheduled and running jobs apart (no total that mixes
running jobs in), the plots' labels read at 11 px or more, and the tab's icon
is served.

The workload is made through the client under a frozen clock (no worker runs),
so its times are the same at every run."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import pytest

from tests.dashboard.conftest import Dashboard
from tests.support.clock import FrozenClock

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytest.importorskip("starlette", reason="the dashboard extra is not installed")
pytest.importorskip("playwright.sync_api", reason="no playwright")

from runtime.dashboard.render import ago, when

WIDTHS = (1400, 800)
RECURRING = ("add", "multiply", "divide_everything_by_the_answer")
GROUP = "myapp.billing.errors.InvoiceRenderingError"
READABLE_PX = 11.0  # the smallest text a plot may show

# whether the characters of `part` in `el`'s text all lie inside `el`'s box (not
# cut by an ellipsis, nor by a clamp of lines)
SHOWS = """(el, part) => {
  const text = el.textContent, at = text.indexOf(part);
  if (at < 0) return false;
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  let offset = 0, started = false, node;
  while ((node = walker.nextNode())) {
    const length = node.textContent.length;
    if (!started && at < offset + length) { range.setStart(node, at - offset); started = true; }
    if (started && at + part.length <= offset + length) {
      range.setEnd(node, at + part.length - offset); break;
    }
    offset += length;
  }
  const box = el.getBoundingClientRect();
  const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
  return rects.length > 0 && rects.every(r => r.left >= box.left - 1 && r.right <= box.right + 1
    && r.top >= box.top - 1 && r.bottom <= box.bottom + 1);
}"""
# every text of the page's plots: its label, its size on screen in px, its box
PLOT_TEXTS = """() => Array.from(document.querySelectorAll('svg.plot text')).map(t => {
  const r = t.getBoundingClientRect();
  const px = parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
  return {label: t.textContent, css: t.getAttribute('class'), px: px,
          left: r.left, right: r.right, top: r.top, bottom: r.bottom};
})"""
OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
CLIPPED = """sel => Math.max(0, ...Array.from(document.querySelectorAll(sel))
  .map(t => t.scrollWidth - t.parentElement.clientWidth))"""


@dataclass(frozen=True)
class Workload:
    recurring: tuple[str, ...]  # the recurring jobs' jids still waiting
    parent: str  # a job that failed for good
    dependent: str  # the job that waited on it: failed as runtime.DependencyFailed
    failed_at_ms: int
    put_at_ms: int


@pytest.fixture
def workload(dashboard: Dashboard) -> Iterator[Workload]:
    client = dashboard.client
    clock = FrozenClock(client.redis, client.keys)
    client.admin.config_set("heartbeat", 86400)
    for name in RECURRING:
        client.scheduling.recur("math", f"myapp.jobs:{name}", every=60)
    billing = client.queue("billing")
    put_at_ms = clock.now_ms
    parent = billing.put("myapp.billing.jobs:render_invoice", {"invoice": 1}, retries=0)
    dependent = billing.put("myapp.billing.jobs:send_invoice", {"invoice": 1}, depends=[parent])
    for i in range(5):
        billing.put("myapp.billing.jobs:audit", {"n": i})
    clock.advance(61)
    client.queue("math").pop(1, worker="worker-1")  # spawns a job per recurrence, takes one
    [held] = billing.pop(1, worker="worker-1")
    assert held.jid == parent
    clock.advance(13 * 60 + 26)
    failed_at_ms = clock.now_ms
    held.fail(GROUP, "InvoiceRenderingError: the template is missing")
    for run_s, job in zip((0.004, 0.2, 1.5, 40.0, 200.0), billing.pop(5, worker="w"), strict=True):
        clock.advance(run_s)
        job.complete()
    clock.advance(5 * 60)
    waiting = client.queue("math").counts()["waiting"]
    assert waiting == len(RECURRING) - 1
    _, jobs = client.admin.jobs("math", "waiting", start=0, count=10)
    jids = tuple(j.jid for j in jobs)
    yield Workload(jids, parent, dependent, failed_at_ms, put_at_ms)
    client.redis.delete(clock.key)


def open_page(page: Page, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, url


def column(page: Page, heading: str) -> Locator:
    """The cells of the jobs table's column headed `heading`."""
    headings = [t.strip().lower() for t in page.locator("table.jobs th").all_inner_texts()]
    index = headings.index(heading) + 1
    return page.locator(f"table.jobs tbody tr td:nth-child({index})")


def shows(element: Locator, part: str) -> bool:
    return bool(element.evaluate(SHOWS, part))


@pytest.mark.parametrize("width", WIDTHS)
def test_recurring_jobs_jids_are_shown_whole_in_lists_and_on_the_recurring_page(
    dashboard: Dashboard, workload: Workload, page: Page, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    assert workload.recurring and all(j.startswith("math/myapp.jobs:") for j in workload.recurring)
    open_page(page, f"{dashboard.url}/queue?name=math&state=waiting")
    dashboard.shot(page, f"lists-recurring-jobs-{width}")
    for jid in workload.recurring:
        link = page.locator(f'table.jobs a.jid[title="{jid}"]')
        assert link.inner_text().replace("\n", "") == jid
        assert shows(link, jid), f"{jid} is cut at {width} px: {link.inner_text()!r}"
    open_page(page, f"{dashboard.url}/recurring")
    dashboard.shot(page, f"lists-recurring-{width}")
    ids = page.locator("table.recurring td.id")
    assert ids.count() == len(RECURRING)
    for i in range(ids.count()):
        cell = ids.nth(i)
        assert shows(cell, str(cell.get_attribute("title"))), cell.inner_text()
    assert page.evaluate(CLIPPED, "table.recurring") <= 0, "the recurring table fits its box"
    assert page.evaluate(OVERFLOW) <= 0


@pytest.mark.parametrize("width", WIDTHS)
def test_a_dependency_failure_shows_the_jid_it_names_and_when_it_failed(
    dashboard: Dashboard, workload: Workload, page: Page, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    now_ms = dashboard.client.conn.now_ms()
    for name, path in (
        ("failed-tab", "/queue?name=billing&state=failed"),
        ("dependency-group", "/failures?group=runtime.DependencyFailed"),
    ):
        open_page(page, dashboard.url + path)
        dashboard.shot(page, f"lists-{name}-{width}")
        row = page.locator(
            "table.jobs tbody tr", has=page.locator(f'a[title="{workload.dependent}"]')
        )
        said = row.locator("td.failure .said")
        assert shows(said, workload.parent), f"{name}: {said.inner_text()!r} at {width} px"
        headings = [t.strip().lower() for t in page.locator("table.jobs th").all_inner_texts()]
        cell = row.locator("td").nth(headings.index("failed"))
        expect_ago = ago(workload.failed_at_ms, now_ms)
        assert expect_ago != ago(workload.put_at_ms, now_ms), "the workload tells them apart"
        assert cell.inner_text().strip() == expect_ago, name
        assert cell.get_attribute("title") == when(workload.failed_at_ms)
        assert cell.is_visible()
        assert page.evaluate(OVERFLOW) <= 0


@pytest.mark.parametrize("width", WIDTHS)
def test_the_overview_counts_waiting_scheduled_and_running_jobs_apart(
    dashboard: Dashboard, workload: Workload, page: Page, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    open_page(page, f"{dashboard.url}/")
    table = page.locator("table.queues")
    headings = [t.strip().lower() for t in table.locator("th").all_inner_texts()]
    shown = [h for h in headings if h]
    assert "to run" not in shown, headings
    row = table.locator("tbody tr", has=page.get_by_role("link", name="math", exact=True))
    cells = row.locator("td")
    counts = dashboard.client.queue("math").counts()
    for state in ("waiting", "scheduled", "running"):
        text = cells.nth(headings.index(state)).inner_text().strip()
        assert text == str(counts[state]), (state, text, counts)
    assert (counts["waiting"], counts["running"]) == (len(RECURRING) - 1, 1)
    numbers = [c.strip() for c in cells.all_inner_texts()]
    assert str(counts["waiting"] + counts["running"]) not in numbers, "no total mixes running in"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_plots_labels_read_at_eleven_pixels_and_do_not_overlap(
    dashboard: Dashboard, workload: Workload, page: Page, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    problems = []
    for name, path in (("overview", "/"), ("stats", "/stats?queue=billing&day=2027-01-15")):
        open_page(page, dashboard.url + path)
        dashboard.shot(page, f"lists-plot-{name}-{width}")
        texts: list[dict[str, Any]] = page.evaluate(PLOT_TEXTS)
        assert len(texts) > 6, name
        problems += [
            f"{name}: {t['label']!r} is {t['px']:.1f} px" for t in texts if t["px"] < READABLE_PX
        ]
        ticks = sorted(
            (t for t in texts if t["css"] == "tick"), key=lambda t: (t["top"], t["left"])
        )
        for a, b in itertools.pairwise(ticks):
            same_line = a["top"] < b["bottom"] and b["top"] < a["bottom"]
            if same_line and a["right"] > b["left"] + 0.5:
                problems.append(f"{name}: {a['label']!r} overlaps {b['label']!r}")
    assert not problems, f"at {width} px:\n" + "\n".join(problems)


def test_the_tab_icon_is_served(dashboard: Dashboard, page: Page) -> None:
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    open_page(page, f"{dashboard.url}/")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href is not None
    for url in (urljoin(page.url, href), f"{dashboard.url}/favicon.ico"):
        answer = page.request.get(url)
        assert answer.status == 200, url
        assert answer.headers["content-type"].startswith("image/"), answer.headers
        body = answer.body()
        assert body[:4] == b"\x00\x00\x01\x00", "an ICO file"
    assert not failed, failed
