"""Handing jobs to idle masters, under a frozen clock: a master's pop that came back
short registers it on its queues; the next job that becomes ready there is leased
to it (a short first lease) and pushed onto its own list; one job per
registration, the queue's head in order, never to a stale registration, a paused
queue or past a domain's limit; its next pop collects and withdraws; a master
leaving gives back what it never took; a dead master's job comes back when its
first lease runs out."""

from __future__ import annotations

import json
from typing import Any

from runtime import Client
from tests.support.clock import FrozenClock

S = 1_000_000


def master_pop(client: Client, worker: str, count: int = 2, *queues: str) -> dict[str, Any]:
    reply: dict[str, Any] = client.conn.run_json(
        "pop", worker, count, "seed", "ordered", 0, 1, *(queues or ("q",))
    )
    return reply


def handed(client: Client, worker: str) -> list[dict[str, Any]]:
    key = client.keys.key("worker_wake", worker=worker)
    return [json.loads(raw) for raw in client.redis.lrange(key, 0, -1)]


def registered(client: Client, queue: str = "q") -> list[str]:
    members = client.redis.zrange(client.keys.key("idle", queue=queue), 0, -1)
    return [m.decode() if isinstance(m, bytes) else str(m) for m in members]


def wake_tokens(client: Client, queue: str = "q") -> int:
    return int(client.redis.llen(client.keys.key("wake", queue=queue)))


def test_a_master_that_came_back_short_gets_the_next_job_handed_to_it(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    assert master_pop(client, "m1")["jobs"] == []
    assert registered(client) == ["m1"]
    jid = client.queue("q").put("app.jobs:run", {"n": 1})
    [reply] = handed(client, "m1")
    assert (reply["jid"], reply["handed"], reply["meta"]["w"]) == (jid, True, "m1")
    assert reply["expires_us"] == clock.now_us + 1 * S, "a short first lease"
    assert reply["lease_ms"] == 60_000, "renewed at the queue's heartbeat"
    job = client.get_job(jid)
    assert job is not None and job.state == "running" and job.worker == "m1"
    assert [(e.event, e.handed) for e in job.history] == [("put", False), ("popped", True)]
    assert registered(client) == [] and wake_tokens(client) == 0


def test_a_registration_takes_one_job_and_the_rest_wait_with_a_wake_token(
    client: Client,
) -> None:
    FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    q = client.queue("q")
    first, second = q.put("app.jobs:run", {}), q.put("app.jobs:run", {})
    assert [r["jid"] for r in handed(client, "m1")] == [first]
    assert client.get_job(second).state == "waiting"  # type: ignore[union-attr]
    assert wake_tokens(client) == 1


def test_a_batch_hands_out_the_queue_s_head_in_order(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    q = client.queue("q")
    [low, high] = client.put_many(
        [q.spec("app.jobs:run", {}, priority=5), q.spec("app.jobs:run", {}, priority=-1)]
    )
    assert [r["jid"] for r in handed(client, "m1")] == [high]
    assert client.get_job(low).state == "waiting"  # type: ignore[union-attr]


def test_stale_registrations_and_paused_queues_get_nothing(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    q = client.queue("q")
    master_pop(client, "m1")
    clock.advance(31)  # older than idle_fresh_ms: perhaps a master that died
    stale = q.put("app.jobs:run", {})
    assert handed(client, "m1") == [] and registered(client) == []
    assert client.get_job(stale).state == "waiting"  # type: ignore[union-attr]
    master_pop(client, "m2", 5)
    q.pause()
    assert q.pop(5) == []
    paused = q.put("app.jobs:run", {})
    assert handed(client, "m2") == []
    assert client.get_job(paused).state == "waiting"  # type: ignore[union-attr]


def test_the_next_pop_collects_what_was_handed_and_withdraws(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    jid = client.queue("q").put("app.jobs:run", {})
    reply = master_pop(client, "m1", 1)
    assert [(j["jid"], j.get("handed")) for j in reply["jobs"]] == [(jid, True)]
    assert handed(client, "m1") == [] and registered(client) == [], "a full pop: busy"
    job = client.get_job(jid)
    assert job is not None and [e.event for e in job.history] == ["put", "popped"]


def test_a_leaving_master_gives_back_what_was_handed_to_it(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    jid = client.queue("q").put("app.jobs:run", {})
    assert client.conn.run("forget_worker", "m1", "q") == 0
    job = client.get_job(jid)
    assert job is not None and job.state == "waiting" and job.remaining == job.retries
    assert [e.event for e in job.history] == ["put", "popped", "released"]
    assert handed(client, "m1") == [] and registered(client) == []


def test_a_dead_master_s_job_comes_back_when_its_first_lease_runs_out(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    jid = client.queue("q").put("app.jobs:run", {})
    assert client.queue("q").pop(1, worker="m2") == []
    clock.advance(1.001)  # m1 never took it: its first lease runs out
    [job] = client.queue("q").pop(1, worker="m2")
    assert job.jid == jid and job.job.remaining == job.job.retries - 1
    assert [e.event for e in job.job.history] == ["put", "popped", "lease-lost", "popped"]


def wake_token(client: Client, queue: str = "q") -> str | None:
    raw = client.redis.lindex(client.keys.key("wake", queue=queue), 0)
    return raw.decode() if isinstance(raw, bytes) else raw


def test_a_job_handed_while_another_master_waits_leaves_its_first_lease_s_end(
    client: Client,
) -> None:
    clock = FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    clock.advance(0.1)
    master_pop(client, "m2")
    jid = client.queue("q").put("app.jobs:run", {})
    assert [r["jid"] for r in handed(client, "m1")] == [jid], "the longest waiting"
    assert wake_token(client) == f"at:{clock.now_us + 1 * S}", "m2 looks when that lease ends"
    assert registered(client) == ["m2"]
    clock.advance(1.001)  # m1 died: it never renewed
    [job] = client.queue("q").pop(1, worker="m2")
    assert job.jid == jid and job.job.remaining == job.job.retries - 1
    assert [e.event for e in job.job.history] == ["put", "popped", "lease-lost", "popped"]


def test_a_job_handed_to_the_only_waiting_master_leaves_no_token(client: Client) -> None:
    FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    client.queue("q").put("app.jobs:run", {})
    assert len(handed(client, "m1")) == 1 and wake_tokens(client) == 0


def test_a_token_that_says_look_now_replaces_one_that_says_look_later(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    master_pop(client, "m1")
    master_pop(client, "m2")
    q = client.queue("q")
    q.put("app.jobs:run", {})
    assert wake_token(client) == f"at:{clock.now_us + 1 * S}"
    client.redis.zrem(client.keys.key("idle", queue="q"), "m2")  # m2 busy: nobody to hand to
    q.put("app.jobs:run", {})
    assert wake_token(client) == "1" and wake_tokens(client) == 1, "work is left: look now"


def test_a_domain_over_its_limit_is_not_handed_and_the_master_stays_registered(
    client: Client,
) -> None:
    FrozenClock(client.redis, client.keys)
    client.set_domain_limit("slow.example", rate=1, period=60)
    master_pop(client, "m1")
    master_pop(client, "m2")
    q = client.queue("q")
    first = q.put("app.jobs:run", {}, domain="slow.example")
    second = q.put("app.jobs:run", {}, domain="slow.example")
    assert [r["jid"] for r in handed(client, "m1") + handed(client, "m2")] == [first]
    assert client.get_job(second).state == "throttled"  # type: ignore[union-attr]
    assert len(registered(client)) == 1
