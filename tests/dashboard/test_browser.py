"""The dashboard in a real browser (headless Chromium), against a real Redis and a
real worker: every page opens, a job is followed from waiting to complete, a queue
is paused and resumed, a failure group is retried, a running job is cancelled, and
the live numbers change without a reload. Each page leaves a screenshot."""

from __future__ import annotations

import http.server
import re
import threading
from typing import TYPE_CHECKING, Any

import pytest

from runtime import Client
from tests.dashboard.conftest import Dashboard, serve
from tests.integration.conftest import StartMaster
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from runtime.dashboard import plots

expect: Any = pytest.importorskip("playwright.sync_api", reason="no playwright").expect

JOBS = "tests.integration.jobs"


def state_of(client: Client, jid: str) -> str | None:
    job = client.get_job(jid)
    return None if job is None else job.state


def ended(client: Client, *jids: str) -> bool:
    return all(state_of(client, jid) in ("complete", "failed") for jid in jids)


def open_page(page: Page, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, url


def test_every_page_opens_and_shows_what_the_workload_left(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    master = start_master("pages")
    queue = client.queue("pages")
    talk = queue.put(f"{JOBS}:talk", {"word": "bonjour"}, tags=["blue"])
    failing = queue.put(f"{JOBS}:fail", {"n": 1}, retries=0)
    later = queue.put(f"{JOBS}:noop", {}, delay=3600)
    queue.put(f"{JOBS}:noop", {}, depends=[later])
    client.scheduling.recur("pages", f"{JOBS}:noop", every=3600, id="hourly-noop")
    client.set_domain_limit("example.com", rate=1, period=60)
    limited = [queue.put(f"{JOBS}:noop", {"i": i}, domain="example.com") for i in range(2)]
    wait_for(lambda: ended(client, talk, failing, limited[0]), 30, what="the jobs to end")

    checks = [
        ("overview", "/", "Overview", "pages"),
        ("queues", "/queues", "Queues", "pages"),
        ("queue", "/queue?name=pages&state=complete", "Queue pages", talk),
        ("queue-scheduled", "/queue?name=pages&state=scheduled", "Queue pages", later),
        ("queue-depends", "/queue?name=pages&state=depends", "Queue pages", f"{JOBS}:noop"),
        ("job", f"/job?jid={talk}", talk, "bonjour"),
        ("job-failed", f"/job?jid={failing}", failing, "failing on purpose"),
        ("find-tag", "/find?q=blue", "Find", talk),
        ("failures", "/failures", "Failures", "builtins.ValueError"),
        ("failure-group", "/failures?group=builtins.ValueError", "Failures", failing),
        ("workers", "/workers", "Workers", str(master.pid)),
        ("domains", "/domains", "Domains", "example.com"),
        ("recurring", "/recurring", "Recurring jobs", "hourly-noop"),
        ("stats", "/stats?queue=pages", "Statistics of pages", "Run time"),
    ]
    for name, path, heading, shown in checks:
        open_page(page, dashboard.url + path)
        expect(page.locator("h1")).to_contain_text(heading)
        expect(page.locator("main")).to_contain_text(shown)
        dashboard.shot(page, name)
    open_page(page, f"{dashboard.url}/domains")
    expect(page.locator("tr", has_text="example.com").locator("td.throttled")).to_have_text("1")
    open_page(page, f"{dashboard.url}/job?jid={talk}")
    expect(page.locator("pre.data").last).to_contain_text('"said": "bonjour"')
    expect(page.locator("ol.timeline")).to_contain_text("completed")


def test_a_queue_is_paused_and_resumed_and_its_job_followed_to_complete_live(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    start_master("follow")
    first = client.queue("follow").put(f"{JOBS}:noop", {})
    wait_for(lambda: ended(client, first), 30, what="the first job")

    open_page(page, f"{dashboard.url}/queues")
    row = page.locator("tr", has=page.get_by_role("link", name="follow", exact=True))
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash")).to_have_text("paused follow")
    assert client.status("follow")["follow"]["paused"] is True

    jid = client.queue("follow").put(f"{JOBS}:talk", {"word": "live"})
    watcher = page.context.new_page()
    open_page(watcher, f"{dashboard.url}/job?jid={jid}")
    expect(watcher.locator('[data-live="job.state"]')).to_have_text("waiting")
    watcher.evaluate("window.notReloaded = true")

    page.get_by_role("link", name="follow", exact=True).first.click()
    page.get_by_role("button", name="Resume").click()
    expect(page.locator(".flash")).to_have_text("resumed follow")
    expect(watcher.locator('[data-live="job.state"]')).to_have_text("complete", timeout=30_000)
    expect(watcher.locator('[data-live="job.result"]')).to_contain_text('"said": "live"')
    assert watcher.evaluate("window.notReloaded") is True
    dashboard.shot(watcher, "job-followed-live")


def test_a_failure_group_is_retried_from_the_failures_page(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    start_master("flaky")
    jids = [client.queue("flaky").put(f"{JOBS}:fail", {"n": i}, retries=0) for i in range(3)]
    wait_for(lambda: ended(client, *jids), 30, what="the jobs to fail")
    client.queue("flaky").pause()  # retried jobs stay waiting: nothing runs them again

    open_page(page, f"{dashboard.url}/failures?group=builtins.ValueError")
    page.locator("tr", has_text=jids[0]).get_by_role("button", name="Retry").click()
    expect(page.locator(".flash")).to_contain_text(f"retried {jids[0]}")
    assert state_of(client, jids[0]) == "waiting"

    open_page(page, f"{dashboard.url}/failures")
    row = page.locator("tr", has_text="builtins.ValueError")
    expect(row).to_contain_text("2")
    row.get_by_role("button", name="Retry all").click()
    expect(page.locator(".flash")).to_have_text("retried 2 failed jobs of builtins.ValueError")
    expect(page.locator("main")).to_contain_text("no failed jobs")
    assert [state_of(client, j) for j in jids] == ["waiting"] * 3
    assert client.failed().get("builtins.ValueError", 0) == 0


def test_a_running_job_is_cancelled_from_its_page(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    start_master("slow")
    jid = client.queue("slow").put(f"{JOBS}:sleep", {"seconds": 60})
    wait_for(lambda: state_of(client, jid) == "running", 30, what="the job to run")

    open_page(page, f"{dashboard.url}/job?jid={jid}")
    expect(page.locator('[data-live="job.state"]')).to_have_text("running")
    dashboard.shot(page, "job-running")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator(".flash")).to_have_text(f"cancelled {jid}")
    expect(page.locator("h1")).to_contain_text("Queue slow")
    tomb = client.get_job(jid)
    assert tomb is not None and tomb.cancellation is not None
    assert (tomb.state, tomb.cancellation.by) == ("cancelled", "dashboard")

    def let_go() -> bool:
        return all(jid not in info.get("jobs", ()) for info in client.admin.workers().values())

    wait_for(let_go, 15, what="the worker to let the cancelled job go")


def test_a_running_jobs_page_shows_its_first_lines_and_follows_its_output(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    start_master("chatty", modules=("tests.integration.seeing_jobs",))
    jid = client.queue("chatty").put(
        "tests.integration.seeing_jobs:tick", {"count": 40, "every_s": 0.3}
    )
    wait_for(lambda: client.admin.live_output(jid)[1], 30, what="the job's first lines")
    open_page(page, f"{dashboard.url}/job?jid={jid}")
    page.evaluate("window.notReloaded = true")
    output = page.locator('[data-live="job.live"]')
    expect(output).to_contain_text("tick 0 at ")
    expect(output).to_contain_text("tick 12 at ", timeout=15_000)  # followed, live
    assert page.evaluate("window.notReloaded") is True
    dashboard.shot(page, "job-live-output")


def test_the_live_numbers_change_without_a_reload(
    dashboard: Dashboard, page: Page, start_master: StartMaster
) -> None:
    client = dashboard.client
    client.queue("held").pause()
    start_master("busy")
    open_page(page, dashboard.url + "/")
    page.evaluate("window.notReloaded = true")
    waiting = page.locator('[data-live="q.held.waiting"]')
    expect(waiting).to_have_text("0")

    for i in range(5):
        client.queue("held").put(f"{JOBS}:noop", {"i": i})
    expect(waiting).to_have_text("5", timeout=10_000)

    jids = [client.queue("busy").put(f"{JOBS}:noop", {"i": i}) for i in range(20)]
    rate = page.locator('[data-live="rate.complete"]')
    expect(rate).not_to_have_text(re.compile(r"^(0|-)$"), timeout=15_000)
    wait_for(lambda: ended(client, *jids), 30, what="the busy jobs")
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator(".plot-box polyline.s-complete")).to_have_count(1)
    dashboard.shot(page, "overview-live")


def test_a_dashboard_started_after_the_jobs_ran_draws_them_from_its_first_page(
    dashboard: Dashboard, page: Page
) -> None:
    """The last hour comes from Redis, not from what one dashboard process watched:
    one started later (a restart, another host) draws the same history at once."""
    client = dashboard.client
    queue = client.queue("earlier")
    for i in range(4):
        queue.put(f"{JOBS}:noop", {"i": i}, retries=0)
    jobs = queue.pop(4, worker="w")
    client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs[:3]})
    jobs[3].fail("tests.Gone", "failed before any dashboard looked")

    fresh = Client.from_url(client.url, namespace=client.keys.namespace)
    url, server, thread = serve(fresh)
    try:
        open_page(page, url + "/")
        baseline = plots.LINE_SIZE[1] - plots.BOTTOM
        for series in ("s-complete", "s-failed"):
            line = page.locator(f".plot-box polyline.{series}")
            expect(line).to_have_count(1)
            points = str(line.get_attribute("points")).split()
            assert min(float(p.split(",")[1]) for p in points) < baseline, series
        dashboard.shot(page, "overview-history")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        fresh.close()


def test_a_form_on_another_site_cannot_act_through_the_browser(
    dashboard: Dashboard, page: Page
) -> None:
    """CSRF as a browser does it: a page of another origin (another port) posts a
    form to the dashboard. The browser sends it with its own Sec-Fetch-Site and
    Origin; the dashboard refuses it, and the job is untouched."""
    client = dashboard.client
    client.queue("q").pause()
    jid = client.queue("q").put(f"{JOBS}:noop", {})
    evil = (
        f'<form id="f" method="post" action="{dashboard.url}/action/cancel">'
        f'<input name="jid" value="{jid}"></form>'
        "<script>document.getElementById('f').submit()</script>"
    ).encode()

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(evil)

        def log_message(self, *args: Any) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with page.expect_response(f"{dashboard.url}/action/cancel") as posted:
            page.goto(f"http://localhost:{other.server_address[1]}/")
        assert posted.value.status == 403
        expect(page.locator("body")).to_contain_text("refused")
    finally:
        other.shutdown()
        other.server_close()
    assert state_of(client, jid) == "waiting", "the other site's form changed nothing"
