"""Progress (progress.lua), the wake-up lists of waiters (wait.lua, lib/wait.lua)
and the cancel notice to a running job's holder (cancel.lua), under a frozen clock."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from runtime import Client, LeaseLost, NoSuchJob
from runtime.queue import ops
from runtime.vocabulary import JobState
from tests.conftest import record, snapshot
from tests.support.clock import FrozenClock

W = "host-1"


@pytest.fixture
def subscriber(client: Client) -> Iterator[Any]:
    pubsub = client.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    yield pubsub
    pubsub.close()


def messages(pubsub: Any, quiet_s: float = 0.3) -> list[str]:
    """The messages published, until none came for `quiet_s` (subscribe
    confirmations, read as None, do not end it)."""
    out: list[str] = []
    deadline = time.monotonic() + quiet_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.05)
        if message is not None:
            data = message["data"]
            out.append(data.decode() if isinstance(data, bytes) else data)
            deadline = time.monotonic() + quiet_s
    return out


def test_progress_is_stored_listed_while_running_and_kept_after(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    [job] = client.queue("q").pop(1, worker=W)
    token = job.token or ""
    clock.advance(1)
    assert client.leases.progress("j1", W, token, 3, 10, "page 3") == "running"
    first_ms = clock.now_ms
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert meta["pg"] == 1 and len(meta["h"]) == 2, "no history event per progress"
    clock.advance(1)
    client.leases.progress("j1", W, token, 4.5, None, None)
    progressing = client.keys.key("progressing", queue="q")
    assert client.redis.zrange(progressing, 0, -1, withscores=True) == [(b"j1", clock.now_ms)]
    assert client.get_job("j1").progress == {  # type: ignore[union-attr]
        "done": 4.5,
        "total": None,
        "message": None,
        "at_ms": clock.now_ms,
    }
    assert first_ms < clock.now_ms
    client.leases.progress("j1", W, token, 10, 10, "é" * 2000)
    stored = client.get_job("j1").progress  # type: ignore[union-attr]
    assert stored is not None and stored["message"] == "é" * 512, "cut to 1 KiB, whole characters"
    job.complete()
    assert client.redis.exists(progressing) == 0
    assert client.get_job("j1").progress["done"] == 10  # type: ignore[index, union-attr]


def test_a_new_attempt_starts_without_the_last_one_s_progress(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    [job] = client.queue("q").pop(1, worker=W)
    client.leases.progress("j1", W, job.token or "", 1, 2, "half")
    job.retry("app.Boom", "tb", delay=0)
    assert client.get_job("j1").progress is not None  # type: ignore[union-attr]
    [again] = client.queue("q").pop(1, worker=W)
    assert again.job.progress is None
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert "pg" not in meta
    assert client.redis.exists(client.keys.key("progress")) == 0


def test_only_the_lease_holder_tells_progress(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    [job] = client.queue("q").pop(1, worker=W)
    before = snapshot(client)
    with pytest.raises(LeaseLost):
        client.leases.progress("j1", "intruder", job.token or "", 1)
    with pytest.raises(LeaseLost):
        client.leases.progress("j1", W, "0" * 24, 1)
    job.complete()
    done = snapshot(client)
    with pytest.raises(LeaseLost):
        client.leases.progress("j1", W, job.token or "", 1)
    assert snapshot(client) == done != before


def test_a_tracked_job_publishes_its_progress(
    client: Client, clock: FrozenClock, subscriber: Any
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", tracked=True)
    [job] = client.queue("q").pop(1, worker=W)
    subscriber.subscribe(client.keys.key("events"))
    assert messages(subscriber) == []  # subscribed
    client.leases.progress("j1", W, job.token or "", 2, 4, "half")
    assert [json.loads(m) for m in messages(subscriber)] == [
        {
            "event": "progress",
            "jid": "j1",
            "queue": "q",
            "t": clock.now_ms,
            "done": 2,
            "total": 4,
            "message": "half",
        },
    ]


def test_cancel_of_a_running_job_tells_its_holder_on_its_channel(
    client: Client, clock: FrozenClock, subscriber: Any
) -> None:
    q = client.queue("q")
    for jid in ("run", "wait"):
        q.put("a.b:c", {}, jid=jid)
    [job] = q.pop(1, worker=W)
    subscriber.subscribe(client.keys.cancels(W), client.keys.cancels("other"))
    assert messages(subscriber) == []  # subscribed
    assert client.cancel("run", "wait") == ["run", "wait"]
    assert messages(subscriber) == ["run"], "only running jobs, only to their holder"
    assert client.leases.heartbeat(W, {"run": job.token or ""}).lost == ("run",)


def test_a_wait_registers_in_the_record_and_the_end_pushes_one_token_per_waiter(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    assert client.conn.call(ops.wait("j1", 0)) == ops.Ending(JobState.WAITING)
    assert "wt" not in record(client, "j1")[0]  # type: ignore[index]
    assert client.conn.call(ops.wait("j1", 30_000)) == ops.Ending(JobState.WAITING)
    clock.advance(1)
    assert client.conn.call(ops.wait("j1", 5_000)).state == "waiting"
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert (meta["wt"], meta["wn"]) == (clock.now_ms - 1000 + 30_000, 2)
    [job] = client.queue("q").pop(1, worker=W)
    assert client.conn.call(ops.wait("j1", 1000)).state == "running"
    clock.advance(2)
    job.complete(result={"ok": True})
    key = client.keys.waited("j1")
    assert client.redis.lrange(key, 0, -1) == [b"complete"] * 3
    ttl_ms = client.redis.pttl(key)
    assert 0 < ttl_ms <= 30_000 - 3000 + 5000
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert "wt" not in meta and "wn" not in meta
    assert client.conn.call(ops.wait("j1", 1000)) == ops.Ending(JobState.COMPLETE, {"ok": True})


def test_the_ends_wake_their_waiters_with_how_they_ended(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for jid in ("done", "bad", "gone", "nobody"):
        q.put("a.b:c", {}, jid=jid, retries=0)
        client.conn.call(ops.wait(jid, 10_000)) if jid != "nobody" else None
    jobs = {j.jid: j for j in q.pop(4, worker=W)}
    jobs["done"].complete()
    jobs["bad"].retry("app.Boom", "tb\nValueError: x", delay=0)  # none left: failed
    client.cancel("gone")
    jobs["nobody"].complete()
    tokens = {
        jid: client.redis.lrange(client.keys.waited(jid), 0, -1)
        for jid in ("done", "bad", "gone", "nobody")
    }
    assert tokens == {
        "done": [b"complete"],
        "bad": [b"failed"],
        "gone": [b"cancelled"],
        "nobody": [],
    }
    assert client.conn.call(ops.wait("bad", 0)) == ops.Ending(
        JobState.FAILED, group="app.Boom", message="tb\nValueError: x"
    )
    assert client.conn.call(ops.wait("gone", 0)) == ops.Ending(
        JobState.CANCELLED, at_ms=clock.now_ms, by="api"
    )
    client.redis.hdel(client.keys.key("jobs"), "gone")  # a cancel that left no tombstone
    with pytest.raises(NoSuchJob):
        client.conn.call(ops.wait("gone", 0))


def test_a_waiter_whose_wait_is_over_gets_no_token(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    client.conn.call(ops.wait("j1", 1000))
    [job] = client.queue("q").pop(1, worker=W)
    clock.advance(2)
    job.complete()
    assert client.redis.exists(client.keys.waited("j1")) == 0


def test_a_dependency_failure_wakes_the_waiters_of_the_jobs_it_fails(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="a", retries=0)
    client.queue("q").put("a.b:c", {}, jid="b", depends=["a"])
    client.conn.call(ops.wait("b", 10_000))
    [a] = client.queue("q").pop(1, worker=W)
    a.fail("app.Boom", "tb")
    assert client.redis.lrange(client.keys.waited("b"), 0, -1) == [b"failed"]


def test_pubsub_needs_no_key_of_its_own(client: Client) -> None:
    assert isinstance(client.redis, redis.Redis)
    assert client.keys.cancels("h-1") == client.keys.root + ":cancel:h-1"
    assert client.keys.waited("j") == client.keys.root + ":wait:j"
