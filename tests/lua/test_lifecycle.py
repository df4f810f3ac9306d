"""Whole timelines of one job under a frozen clock, asserting whole records."""

from __future__ import annotations

import json

import pytest

from runtime import Client, LeaseLost
from tests.conftest import record, snapshot
from tests.support.clock import FrozenClock

pytestmark = pytest.mark.every_version  # whole timelines on both paths (FCALL on 7, EVALSHA on 6.2)

W1 = "host-1"


def test_put_stores_the_whole_record_and_a_put_event(client: Client, clock: FrozenClock) -> None:
    jid = client.queue("emails").put(
        "myapp.jobs:send_email", {"to": "a@b.c"}, jid="j1", tags=["vip", "vip", "eu"]
    )
    assert jid == "j1"
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert meta == {
        "k": "myapp.jobs:send_email",
        "q": "emails",
        "s": "waiting",
        "r": 5,
        "m": 5,
        "o": 1,
        "g": ["vip", "eu"],
        "h": [{"e": "put", "t": clock.now_ms}],
    }
    assert data == '{"to":"a@b.c"}'
    assert client.redis.zscore(client.keys.key("tag", tag="vip"), "j1") == clock.now_ms


def test_a_spec_giving_every_option_at_its_default_puts_the_same_job(
    client: Client, clock: FrozenClock
) -> None:
    """The client leaves options at their defaults out of a put's spec; a spec
    that gives them (an older client, a hand-written one) makes the same record."""
    q = client.queue("emails")
    short = q.spec("myapp.jobs:send", {"n": 1}, jid="short")
    assert set(json.loads(short.to_wire()[0])) == {"queue", "klass", "jid"}
    client.put_many([short])
    given = {
        "jid": "given",
        "klass": "myapp.jobs:send",
        "queue": "emails",
        "priority": 0,
        "retries": 5,
        "tags": [],
        "depends": [],
        "domain": None,
        "unique_key": None,
        "unique_for": None,
        "timeout_s": None,
        "backoff": None,
        "by": None,
        "delay_ms": None,
        "at_ms": None,
        "requeue_if_running": False,
        "tracked": False,
    }
    assert json.loads(client.conn.run("put", json.dumps(given), '{"n":1}')) == ["given"]
    short_meta, short_data = record(client, "short")  # type: ignore[misc]
    given_meta, given_data = record(client, "given")  # type: ignore[misc]
    assert short_meta == {
        "k": "myapp.jobs:send",
        "q": "emails",
        "s": "waiting",
        "r": 5,
        "m": 5,
        "o": 1,
        "h": [{"e": "put", "t": clock.now_ms}],
    }
    assert given_meta == {**short_meta, "o": 2}
    assert short_data == given_data == '{"n":1}'


def test_put_pop_heartbeat_complete_timeline(client: Client, clock: FrozenClock) -> None:
    q = client.queue("emails")
    q.put("myapp.jobs:send", {"n": 1}, jid="j1", priority=-3, retries=2)
    put_ms = clock.now_ms
    clock.advance(1.5)
    [job] = q.pop(5, worker=W1)
    pop_ms = clock.now_ms
    assert (job.jid, job.job.state, job.worker, job.job.attempt, job.job.priority) == (
        "j1",
        "running",
        W1,
        1,
        -3,
    )
    assert len(job.token or "") == 24
    assert job.job.data == {"n": 1}
    clock.advance(20)
    beat = client.leases.heartbeat(W1, {"j1": job.token or ""})
    assert beat.renewed == ("j1",) and beat.lost == ()
    running = client.keys.key("running", queue="emails")
    assert client.redis.zscore(running, "j1") == clock.now_us + 60_000_000
    clock.advance(3)
    assert job.complete() == "complete"
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert meta == {
        "k": "myapp.jobs:send",
        "q": "emails",
        "s": "complete",
        "p": -3,
        "r": 2,
        "m": 2,
        "a": 1,
        "pt": pop_ms,
        "w": W1,
        "l": job.token,
        "lr": "complete",
        "h": [
            {"e": "put", "t": put_ms},
            {"e": "popped", "t": pop_ms, "w": W1},
            {"e": "completed", "t": clock.now_ms, "w": W1},
        ],
    }
    assert client.redis.zscore(client.keys.key("completed"), "j1") == clock.now_us
    assert client.redis.zcard(running) == 0
    assert client.redis.scard(client.keys.key("worker_jobs", worker=W1)) == 0
    assert q.counts() == {
        "waiting": 0,
        "throttled": 0,
        "scheduled": 0,
        "running": 0,
        "stalled": 0,
        "depends": 0,
        "complete": 1,
        "failed": 0,
        "cancelled": 0,
        "paused": False,
        "size_warning": 0,
        "completed_total": 1,
        "failed_total": 0,
        "retried_total": 0,
        "oldest_waiting_ms": 0,
    }


def test_public_job_fields_follow_the_record(client: Client, clock: FrozenClock) -> None:
    q = client.queue("emails")
    q.put("a.b:c", {"x": [1, 2]}, jid="j1", tags=["t"], retries=3, priority=4)
    job = client.get_job("j1")
    assert job is not None
    assert (job.state, job.data, job.queue, job.priority, job.tags) == (
        "waiting",
        {"x": [1, 2]},
        "emails",
        4,
        ("t",),
    )
    assert (job.retries, job.remaining, job.worker, job.failure) == (3, 3, None, None)
    assert [(e.event, e.at_ms) for e in job.history] == [("put", clock.now_ms)]
    assert client.get_job("nope") is None


def test_expired_lease_makes_the_job_poppable_again_with_one_retry_spent(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("heartbeat", 10)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1", retries=3)
    q.put("a.b:c", {}, jid="j2", retries=3)
    [first] = q.pop(1, worker=W1)
    assert client.status("q")["q"]["running"] == 1
    clock.advance(10.001)
    assert client.status("q")["q"]["stalled"] == 1
    [again] = q.pop(1, worker="host-2")
    assert again.jid == "j1", "a reclaimed job goes before younger ones"
    assert (again.job.remaining, again.job.attempt, again.worker) == (2, 2, "host-2")
    assert again.token != first.token
    assert [(e.event, e.worker) for e in again.job.history] == [
        ("put", None),
        ("popped", W1),
        ("lease-lost", W1),
        ("popped", "host-2"),
    ]
    before = client.redis.hget(client.keys.key("jobs"), "j1")
    with pytest.raises(LeaseLost):
        first.complete()
    assert client.redis.hget(client.keys.key("jobs"), "j1") == before


def test_expired_lease_with_no_retries_left_fails_with_a_clear_group(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("q-heartbeat", 5)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1", retries=0)
    q.pop(1, worker=W1)
    clock.advance(6)
    assert q.pop(1, worker="host-2") == []
    job = client.get_job("j1")
    assert job is not None and job.state == "failed"
    assert job.failure is not None and job.failure.group == "runtime.LeaseExpired"
    assert "host-1 stopped renewing" in job.failure.message
    assert client.failed() == {"runtime.LeaseExpired": 1}


def test_lease_expired_but_not_reclaimed_is_already_lost(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("heartbeat", 2)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1")
    [job] = q.pop(1, worker=W1)
    clock.advance(2.5)
    before = snapshot(client)
    assert client.leases.heartbeat(W1, {"j1": job.token or ""}).lost == ("j1",)
    with pytest.raises(LeaseLost):
        job.complete()
    assert snapshot(client) == before


def test_per_queue_heartbeat_sets_the_lease_length(client: Client, clock: FrozenClock) -> None:
    client.admin.config_set("fast-heartbeat", 3)
    client.queue("fast").put("a.b:c", {}, jid="f")
    client.queue("slow").put("a.b:c", {}, jid="s")
    client.queue("fast").pop(1, worker=W1)
    client.queue("slow").pop(1, worker=W1)
    f = client.redis.zscore(client.keys.key("running", queue="fast"), "f")
    s = client.redis.zscore(client.keys.key("running", queue="slow"), "s")
    assert (f, s) == (clock.now_us + 3_000_000, clock.now_us + 60_000_000)
