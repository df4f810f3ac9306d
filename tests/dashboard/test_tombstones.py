"""A cancelled job's tombstone as an operator meets it: `runtime cancel` and the
dashboard's Cancel say by what, `runtime job` (and --json), `runtime jobs
--state cancelled`, `runtime status`, the dashboard's job and queue pages and
/metrics show and count it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboard.conftest import Dashboard
from tests.integration.conftest import Invoke

httpx = pytest.importorskip("httpx", reason="the dashboard extra is not installed")


@pytest.fixture
def http(dashboard: Dashboard) -> Iterator[Any]:
    with httpx.Client(base_url=dashboard.url, follow_redirects=False, timeout=10) as session:
        yield session


def test_runtime_job_shows_when_and_by_what_a_job_was_cancelled(
    dashboard: Dashboard, cli: Invoke
) -> None:
    dashboard.client.queue("q").put("app.jobs:run", {"big": "x" * 100}, jid="j1")
    code, out, _ = cli("cancel", "j1")
    assert (code, out) == (0, "cancelled 1 of 1\n")
    code, out, _ = cli("job", "j1")
    lines = out.splitlines()
    assert code == 0 and "state      cancelled" in lines and "data       {}" in lines
    [said] = [line for line in lines if line.startswith("cancelled  at ")]
    assert said.endswith("by cli (its data deleted: a tombstone until retention)")
    assert lines[-1].split()[2:] == ["cancelled", "by=cli"]
    code, out, _ = cli("job", "j1", "--json")
    shown = json.loads(out)
    assert shown["state"] == "cancelled" and shown["cancellation"]["by"] == "cli"
    assert isinstance(shown["cancellation"]["at_ms"], int) and shown["data"] == {}
    code, out, _ = cli("jobs", "q", "--state", "cancelled", "--json")
    assert [j["jid"] for j in json.loads(out)["jobs"]] == ["j1"]
    code, out, _ = cli("status", "--json")
    assert json.loads(out)["q"]["cancelled"] == 1
    code, out, err = cli("cancel", "j1")  # a tombstone is no job to cancel again
    assert code == 1 and "no job j1" in err


def test_the_dashboard_cancels_by_its_name_and_shows_the_tombstone(
    dashboard: Dashboard, http: Any
) -> None:
    dashboard.client.queue("q").put("app.jobs:run", {}, jid="j1")
    form = {"jid": "j1", "next": "/job?jid=j1"}
    answer = http.post("/action/cancel", data=form, headers={"Origin": dashboard.url})
    assert answer.status_code == 303
    job = dashboard.client.get_job("j1")
    assert job is not None and job.cancellation is not None
    assert job.cancellation.by == "dashboard"
    page = http.get("/job", params={"jid": "j1"}).text
    assert '<span class="state st-cancelled" data-live="job.state">cancelled</span>' in page
    assert "<dt>cancelled</dt>" in page and "by dashboard" in page
    assert "/action/cancel" not in page and "/action/retry" not in page, "no action on a tombstone"
    listed = http.get("/queue", params={"name": "q", "state": "cancelled"}).text
    assert "j1" in listed
    metrics = http.get("/metrics").text
    assert 'runtime_jobs{queue="q",state="cancelled"} 1.0' in metrics
