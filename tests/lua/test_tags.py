"""Tags added and removed later, jobs found by tag, tracked jobs and their events."""

from __future__ import annotations

import threading
from typing import Any

from runtime import Client
from tests.conftest import record
from tests.support.clock import FrozenClock
from tests.support.waiting import wait_for


def test_tags_are_added_and_removed_later(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1", tags=["a"])
    assert client.scheduling.tag("j1", "b", "a", "c") == ["a", "b", "c"]
    assert client.scheduling.untag("j1", "a", "zzz") == ["b", "c"]
    assert record(client, "j1")[0]["g"] == ["b", "c"]  # type: ignore[index]
    assert client.scheduling.untag("j1", "b", "c") == []
    assert "g" not in record(client, "j1")[0]  # type: ignore[index]
    assert client.scheduling.tagged("a") == (0, [])


def test_jobs_by_tag_are_paged_newest_first(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    for i in range(5):
        q.put("a.b:c", {}, jid=f"j{i}", tags=["batch"])
        clock.advance(1)
    total, page = client.scheduling.tagged("batch", start=1, count=2)
    assert total == 5 and [j.jid for j in page] == ["j3", "j2"]


def test_tracked_jobs_are_listed_and_publish_their_events(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("q-heartbeat", 5)
    seen: list[dict[str, Any]] = []
    ready = threading.Event()

    def listen() -> None:
        listener = Client.from_url(client.url, namespace=client.keys.namespace)
        events = listener.scheduling.events(idle_s=5)
        ready.set()
        for event in events:
            seen.append(event)
            if len(seen) == 10:
                return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(5)
    wait_for(lambda: client.redis.pubsub_numsub(client.keys.key("events"))[0][1] == 1, 5)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="t1", tracked=True)
    client.queue("other").put("a.b:c", {}, jid="quiet")
    assert [j.jid for j in client.scheduling.tracked()] == ["t1"]
    [job] = q.pop(1, worker="w")
    job.retry("g", "m", delay=0)
    q.pop(1, worker="w")
    clock.advance(6)
    [job] = q.pop(1, worker="w2")
    job.complete()
    q.put("a.b:c", {}, jid="t2", tracked=True, retries=0)
    [job] = q.pop(1, worker="w3")
    job.fail("myapp.Broken", "Traceback: broken")
    thread.join(10)
    assert [(e["event"], e["jid"]) for e in seen] == [
        ("put", "t1"),
        ("popped", "t1"),
        ("retried", "t1"),
        ("popped", "t1"),
        ("lease-lost", "t1"),
        ("popped", "t1"),
        ("completed", "t1"),
        ("put", "t2"),
        ("popped", "t2"),
        ("failed", "t2"),
    ]
    completed, failed = seen[6], seen[9]
    assert completed == {
        "event": "completed",
        "jid": "t1",
        "queue": "q",
        "t": clock.now_ms,
        "worker": "w2",
    }
    assert failed == {
        "event": "failed",
        "jid": "t2",
        "queue": "q",
        "t": clock.now_ms,
        "worker": "w3",
        "group": "myapp.Broken",
    }
    assert client.get_job("t2").state == "failed"  # type: ignore[union-attr]
    client.scheduling.untrack("t1")
    client.scheduling.untrack("t2")
    assert client.scheduling.tracked() == []
