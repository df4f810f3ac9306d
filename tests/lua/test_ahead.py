"""Popping ahead, under a frozen clock: a pop with ahead_us also leases jobs whose
turn comes within it (a scheduled job due then, a throttled domain's next start),
each with start_in_us, so masters that look a little early start them on time; a
domain's budget then moves from its turn, so a busy domain runs at its rate."""

from __future__ import annotations

import json
from typing import Any

from runtime import Client
from runtime.queue import ops
from tests.support.clock import FrozenClock

MS = 1000  # microseconds in a millisecond


def pop(client: Client, ahead_us: int, *queues: str, count: int = 100) -> list[dict[str, Any]]:
    reply: dict[str, Any] = client.conn.run_json(
        "pop", "w", count, "seed", "ordered", ahead_us, 0, *queues
    )
    jobs: list[dict[str, Any]] = reply["jobs"]
    return jobs


def starts(jobs: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return [(j["jid"], j.get("start_in_us")) for j in jobs]


def test_a_job_due_within_ahead_is_leased_to_start_at_its_due_time(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    q = client.queue("q")
    q.put("app.jobs:run", {}, jid="soon", delay=0.003)
    q.put("app.jobs:run", {}, jid="later", delay=0.009)
    assert pop(client, 0, "q") == []
    assert starts(pop(client, 5 * MS, "q")) == [("soon", 3 * MS)]
    job = client.get_job("soon")
    assert job is not None and job.state == "running"
    assert [(e.event, e.at_ms, e.starts_at_ms) for e in job.history] == [
        ("put", clock.now_ms, None),
        ("popped", clock.now_ms, clock.now_ms + 3),
    ]
    assert q.counts()["scheduled"] == 1
    clock.advance(0.009)
    assert starts(pop(client, 5 * MS, "q")) == [("later", None)], "due now: no wait"


def test_jobs_due_soon_come_after_waiting_ones_in_due_then_put_order(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    q = client.queue("q")
    q.put("app.jobs:run", {}, jid="b", delay=0.004)
    q.put("app.jobs:run", {}, jid="a", delay=0.002)
    q.put("app.jobs:run", {}, jid="c", delay=0.004)
    q.put("app.jobs:run", {}, jid="now")
    assert starts(pop(client, 5 * MS, "q", count=3)) == [
        ("now", None),
        ("a", 2 * MS),
        ("b", 4 * MS),
    ]
    assert starts(pop(client, 5 * MS, "q")) == [("c", 4 * MS)]


def test_a_scheduled_job_with_a_domain_waits_for_its_promotion(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    q = client.queue("q")
    q.put("app.jobs:run", {}, jid="d", delay=0.003, domain="example.com")
    assert pop(client, 5 * MS, "q") == []
    clock.advance(0.003)
    assert starts(pop(client, 5 * MS, "q")) == [("d", None)]


def test_a_throttled_domain_s_next_turn_is_leased_ahead_and_its_rate_kept(
    client: Client,
) -> None:
    clock = FrozenClock(client.redis, client.keys)
    client.set_domain_limit("example.com", rate=10, period=1.0)  # a start per 100 ms
    q = client.queue("q")
    for i in range(4):
        q.put("app.jobs:run", {}, jid=f"j{i}", domain="example.com")
    assert starts(pop(client, 5 * MS, "q")) == [("j0", None)]
    clock.advance(0.096)
    assert pop(client, 0, "q") == [], "not its turn yet"
    assert starts(pop(client, 5 * MS, "q")) == [("j1", 4 * MS)]
    clock.advance(0.100)  # 196 ms: the next turn is at 200 ms, not 196 + 100
    assert starts(pop(client, 5 * MS, "q")) == [("j2", 4 * MS)]
    job = client.get_job("j2")
    assert job is not None
    assert [e.starts_at_ms for e in job.history if e.event == "popped"] == [clock.now_ms + 4]


def test_a_fast_domain_gets_every_turn_within_ahead_in_one_pop(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    client.set_domain_limit("fast.example", rate=1000, period=1.0)  # a start per ms
    q = client.queue("q")
    for i in range(10):
        q.put("app.jobs:run", {}, jid=f"f{i}", domain="fast.example")
    assert starts(pop(client, 5 * MS, "q")) == [
        ("f0", None),
        *((f"f{i}", i * MS) for i in range(1, 6)),
    ]


def test_a_job_leased_ahead_whose_lease_ran_out_is_leased_again(client: Client) -> None:
    """Taken straight from the scheduled set, it never had a ticket in its lane; it
    goes back to the head of its lane all the same (it failed the pop that reclaimed
    it, and was left running, held by no one)."""
    clock = FrozenClock(client.redis, client.keys)
    client.admin.config_set("q-heartbeat", 2)
    q = client.queue("q")
    q.put("app.jobs:run", {}, jid="soon", delay=0.003)
    q.put("app.jobs:run", {}, jid="next", delay=1.0)
    assert starts(pop(client, 5 * MS, "q", count=1)) == [("soon", 3 * MS)]
    clock.advance(2.5)  # its master died: nobody renewed it
    assert starts(pop(client, 0, "q")) == [("soon", None), ("next", None)]
    job = client.get_job("soon")
    assert job is not None and job.state == "running" and job.remaining == 4
    assert [e.event for e in job.history] == ["put", "popped", "lease-lost", "popped"]


def test_a_job_leased_ahead_and_given_back_unstarted_goes_first_again(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    q = client.queue("q")
    q.put("app.jobs:run", {}, jid="soon", delay=0.003)
    [leased] = pop(client, 5 * MS, "q")
    q.put("app.jobs:run", {}, jid="now")
    given = client.conn.call(ops.release("w", {"soon": leased["meta"]["l"]}))
    assert given == {"soon": "waiting"}
    assert starts(pop(client, 0, "q")) == [("soon", None), ("now", None)]
    job = client.get_job("soon")
    assert job is not None and job.attempt == 1 and job.remaining == 5


def test_a_job_leased_ahead_by_the_previous_release_goes_back_to_its_lane(
    client: Client,
) -> None:
    """That release wrote no ticket for it: one is taken when it goes back."""
    clock = FrozenClock(client.redis, client.keys)
    client.admin.config_set("q-heartbeat", 2)
    client.queue("q").put("app.jobs:run", {}, jid="soon", delay=0.003)
    assert starts(pop(client, 5 * MS, "q")) == [("soon", 3 * MS)]
    jobs = client.keys.key("jobs")
    raw = client.redis.hget(jobs, "soon")
    assert isinstance(raw, bytes)
    meta, data = raw.decode().split("\n", 1)
    old = json.loads(meta)
    del old["o"]
    client.redis.hset(jobs, "soon", json.dumps(old, separators=(",", ":")) + "\n" + data)
    clock.advance(2.5)
    assert starts(pop(client, 0, "q")) == [("soon", None)]
