"""A batch's page: its progress bar, callbacks and failed jobs, the retry-all
action (a same-origin POST like the others), and the way to it from a job and
from the search box."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboard.conftest import Dashboard

httpx: Any = pytest.importorskip("httpx", reason="httpx is not installed")
pytest.importorskip("starlette", reason="the dashboard extra is not installed")


@pytest.fixture
def http(dashboard: Dashboard) -> Iterator[Any]:
    with httpx.Client(base_url=dashboard.url, follow_redirects=False, timeout=10) as session:
        yield session


def test_a_batch_page_shows_progress_failures_and_retries_them_all(
    dashboard: Dashboard, http: Any
) -> None:
    client = dashboard.client
    b = client.batch(on_complete=("cb", "app.jobs:done", {}), description="<b>nightly</b>")
    b.put_many([b.queue("q").spec("app.jobs:work", {}, jid=f"bj{i}") for i in range(4)])
    b.close()
    leases = client.queue("q").pop(3, worker="w")
    leases[0].complete()
    leases[1].fail("app.Boom", "boom")
    leases[2].fail("app.Boom", "boom")
    page = http.get("/batch", params={"bid": b.bid})
    assert page.status_code == 200
    text = page.text
    assert 'role="progressbar"' in text and 'aria-valuenow="3"' in text
    assert "width: 25.0%" in text and "width: 50.0%" in text
    assert "&lt;b&gt;nightly&lt;/b&gt;" in text and "<b>nightly</b>" not in text
    assert "bj1" in text and "bj2" in text and "Retry all failed" in text
    refused = http.post("/action/retry-batch", data={"bid": b.bid, "next": "/"})
    assert refused.status_code == 403
    assert client.get_batch(b.bid).failed == 2  # type: ignore[union-attr]
    form = {"bid": b.bid, "next": f"/batch?bid={b.bid}"}
    answer = http.post("/action/retry-batch", data=form, headers={"Origin": dashboard.url})
    assert answer.status_code == 303 and answer.headers["location"] == form["next"]
    assert "retried%202%20failed%20jobs" in answer.headers["set-cookie"]
    status = client.get_batch(b.bid)
    assert status is not None and (status.failed, status.pending) == (0, 3)
    for lease in client.queue("q").pop(3, worker="w"):
        lease.complete()
    settled = http.get("/batch", params={"bid": b.bid}).text
    assert "settled" in settled and "kept" in settled and "/job?jid=" in settled
    job_page = http.get("/job", params={"jid": "bj0"})
    assert f"/batch?bid={b.bid}" in job_page.text
    found = http.get("/find", params={"q": b.bid})
    assert found.status_code == 303 and found.headers["location"] == f"/batch?bid={b.bid}"


def test_an_unknown_batch_is_a_missing_page(dashboard: Dashboard, http: Any) -> None:
    page = http.get("/batch", params={"bid": "nope"})
    assert "No batch nope" in page.text
