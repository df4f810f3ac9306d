"""How the pages lay out in Chromium, 1400 and 800 pixels wide: nothing overflows
the page sideways, times and worker ids stay on one line, lists of jobs show a
preview of each job's data, finished jobs offer no Cancel or priority, and a
failure's traceback folds runtime's own frames. Every page leaves a screenshot
at both widths.

The workload is made through the client under a frozen clock (no worker runs),
so its times are the same at every run: jobs were put 13 m 26 s before the
pages are read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.dashboard.conftest import Dashboard
from tests.integration.conftest import StartMaster
from tests.support.clock import FrozenClock
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("starlette", reason="the dashboard extra is not installed")
expect: Any = pytest.importorskip("playwright.sync_api", reason="no playwright").expect

WIDTHS = (1400, 800)
WORKER = "worker-host-with-a-long-name.example.internal-4242"
GROUP = "myapp.billing.errors.InvoiceRenderingError"
LONG_LINE = "InvoiceRenderingError: " + "the template of the invoice could not be rendered " * 4

# how many lines of text an element's content takes
LINES = """el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  const tops = new Set();
  for (const r of range.getClientRects()) { if (r.width > 0) tops.add(Math.round(r.top)); }
  return tops.size;
}"""
OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
# how far the widest table of failure groups or jobs runs past its scrolling box
CLIPPED = """() => Math.max(0, ...Array.from(document.querySelectorAll('table.groups, table.jobs'))
  .map(t => t.scrollWidth - t.parentElement.clientWidth))"""


@dataclass(frozen=True)
class Workload:
    waiting: str
    running: str
    complete: str
    failed: str


@pytest.fixture
def workload(dashboard: Dashboard) -> Iterator[Workload]:
    client = dashboard.client
    clock = FrozenClock(client.redis, client.keys)
    client.admin.config_set("heartbeat", 86400)
    client.leases.register_worker(
        WORKER,
        host="worker-host-with-a-long-name.example.internal",
        pid=4242,
        queues=["billing", "emails"],
        concurrency=8,
    )
    queue = client.queue("billing")
    jids = [
        queue.put(
            "myapp.billing.jobs:render_invoice",
            {"customer": f"customer-{i}@example.com", "invoice": 1000 + i, "lines": list(range(9))},
            tags=["march", f"batch-{i % 2}"],
        )
        for i in range(8)
    ]
    clock.advance(13 * 60 + 26)
    jobs = queue.pop(6, worker=WORKER)
    jobs[0].complete(result={"pages": 3})
    jobs[1].complete()
    jobs[2].fail(GROUP, f"Traceback (most recent call last):\n  ...\n{LONG_LINE}")
    jobs[3].fail(GROUP, LONG_LINE)
    yield Workload(waiting=jids[7], running=jobs[4].jid, complete=jobs[0].jid, failed=jobs[2].jid)
    client.redis.delete(clock.key)


def pages(w: Workload) -> list[tuple[str, str]]:
    return [
        ("overview", "/"),
        ("queues", "/queues"),
        ("queue-waiting", "/queue?name=billing&state=waiting"),
        ("queue-running", "/queue?name=billing&state=running"),
        ("queue-complete", "/queue?name=billing&state=complete"),
        ("queue-failed", "/queue?name=billing&state=failed"),
        ("job-running", f"/job?jid={w.running}"),
        ("job-failed", f"/job?jid={w.failed}"),
        ("failures", "/failures"),
        ("failure-group", f"/failures?group={GROUP}"),
        ("workers", "/workers"),
        ("find-tag", "/find?q=march"),
        ("stats", "/stats?queue=billing"),
    ]


def column(page: Page, heading: str) -> Any:
    """The cells of the jobs table's column headed `heading`."""
    headings = [t.strip().lower() for t in page.locator("table.jobs th").all_inner_texts()]
    index = headings.index(heading) + 1
    return page.locator(f"table.jobs tbody tr td:nth-child({index})")


def open_page(page: Page, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, url


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_overflows_sideways_and_times_and_worker_ids_stay_on_one_line(
    dashboard: Dashboard, workload: Workload, page: Page, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    problems = []
    for name, path in pages(workload):
        open_page(page, dashboard.url + path)
        dashboard.shot(page, f"{name}-{width}")
        if (over := page.evaluate(OVERFLOW)) > 0:
            problems.append(f"{name} overflows the page by {over} px")
        if (clipped := page.evaluate(CLIPPED)) > 0:
            problems.append(f"{name}: a table of groups or jobs runs {clipped} px past its box")
        if page.locator("table.jobs").count():
            for cell in column(page, "put").all():
                if cell.evaluate(LINES) > 1:
                    problems.append(f"{name}: {cell.inner_text()!r} wraps")
    assert not problems, "\n".join(problems)
    open_page(page, dashboard.url + "/workers")
    worker = page.locator("table.workers td", has_text=WORKER).first
    assert worker.evaluate(LINES) == 1
    open_page(page, f"{dashboard.url}/job?jid={workload.running}")
    assert page.locator("dd", has_text=WORKER).evaluate(LINES) == 1


def test_lists_of_jobs_show_a_preview_of_each_jobs_data(
    dashboard: Dashboard, workload: Workload, page: Page
) -> None:
    for state in ("waiting", "complete", "failed"):
        open_page(page, f"{dashboard.url}/queue?name=billing&state={state}")
        previews = column(page, "data").all_inner_texts()
        assert previews and all("customer-" in p and "@example.com" in p for p in previews)
        assert len(set(previews)) == len(previews), "each job's preview tells it apart"
    open_page(page, f"{dashboard.url}/find?q=march")
    expect(column(page, "data").first).to_contain_text("invoice")


def test_only_unfinished_jobs_offer_cancel_and_a_priority(
    dashboard: Dashboard, workload: Workload, page: Page
) -> None:
    for jid, offered in (
        (workload.waiting, True),
        (workload.running, True),
        (workload.complete, False),
        (workload.failed, False),
    ):
        open_page(page, f"{dashboard.url}/job?jid={jid}")
        expect(page.get_by_role("button", name="Cancel")).to_have_count(int(offered))
        expect(page.locator('input[name="priority"]')).to_have_count(int(offered))
    open_page(page, f"{dashboard.url}/job?jid={workload.failed}")
    expect(page.get_by_role("button", name="Retry now")).to_have_count(1)
    expect(page.get_by_role("button", name="Delete")).to_have_count(1)


def test_a_tracebacks_runtime_frames_are_folded_behind_a_toggle(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    start_master("typed", modules=("tests.integration.jobs", "tests.integration.typed_jobs"))
    jid = client.queue("typed").put("tests.integration.typed_jobs:look_up", {"key": "missing"})
    wait_for(lambda: getattr(client.get_job(jid), "state", None) == "failed", 30, what="failure")
    message = client.get_job(jid).failure.message  # type: ignore[union-attr]
    assert "runtime/children/child.py" in message and "runtime/typed.py" in message

    open_page(page, f"{dashboard.url}/job?jid={jid}")
    traceback = page.locator(".traceback")
    expect(traceback).to_contain_text("typed_jobs.py")  # the job's own frame, always shown
    expect(traceback).to_contain_text("KeyError: 'missing'")
    expect(traceback.get_by_text("runtime/children/child.py").first).not_to_be_visible()
    expect(traceback.get_by_text("runtime/typed.py").first).not_to_be_visible()
    dashboard.shot(page, "traceback-folded")
    toggles = traceback.locator("summary")
    for i in range(toggles.count()):
        toggles.nth(i).click()
    expect(traceback.get_by_text("runtime/children/child.py").first).to_be_visible()
    expect(traceback.get_by_text("runtime/typed.py").first).to_be_visible()
    dashboard.shot(page, "traceback-unfolded")
