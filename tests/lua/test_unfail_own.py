"""unfail with no queue moves each failed job back to its own queue; the
complete and failed indexes of queues (lib/stats.lua) follow the moves."""

from __future__ import annotations

from runtime import Client
from tests.support.clock import FrozenClock

W = "host-1"


def test_unfail_without_a_queue_sends_each_job_back_to_its_own(
    client: Client, clock: FrozenClock
) -> None:
    for queue in ("a", "b"):
        client.queue(queue).put("app:x", {}, jid=f"j-{queue}", retries=0)
        [job] = client.queue(queue).pop(1, worker=W)
        job.fail("app.Boom", "tb")
    assert client.unfail("app.Boom", None) == 2
    assert [(j.queue, j.state) for j in client.get_jobs(["j-a", "j-b"]) if j] == [
        ("a", "waiting"),
        ("b", "waiting"),
    ]
    event = client.get_job("j-a").history[-1]  # type: ignore[union-attr]
    assert (event.event, event.queue) == ("unfailed", "a")


def test_the_complete_and_failed_counts_follow_the_job(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("app:x", {}, jid="a", retries=0)
    q.put("app:x", {}, jid="b", depends=["a"])
    [a] = q.pop(1, worker=W)
    a.fail("app.Boom", "tb")
    assert (q.counts()["failed"], q.counts()["complete"]) == (2, 0), "b failed with a"
    client.scheduling.requeue("a")
    assert (q.counts()["failed"], q.counts()["depends"]) == (0, 1)
    [a] = q.pop(1, worker=W)
    a.complete()
    [b] = q.pop(1, worker=W)
    b.complete(result=1)
    assert (q.counts()["failed"], q.counts()["complete"]) == (0, 2)
    client.cancel("b")
    assert q.counts()["complete"] == 1
