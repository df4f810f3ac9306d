"""What a master's exchange of one job asks of Redis, counted: the pop that saw
its queue's priorities (lanes.lua) learns from that read that the set exists,
so a full pop's wake-up check makes no EXISTS of it; the wake-up token is left (or
not) as before. At the call's end, a queue no master waits on whose token
already says "look now" needs nothing more: no counters read, no hand-off
tried (handoff.lua)."""

from __future__ import annotations

import pytest

from runtime import Client
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from tests.lua.test_put_cost import commands, wake_tokens


def exchange_one(client: Client, token: str | None = None) -> list[str]:
    """Pops a job of `q`, then completes it in an exchange that pops one more,
    the queue's wake-up token being `token` (None: none): the jids the exchange
    popped."""
    [leased] = client.queue("q").pop(1, worker="m1")
    outcomes = Outcomes()
    outcomes.add_complete(leased.jid, leased.token or "")
    wake = client.keys.key("wake", queue="q")
    client.redis.delete(wake)
    if token is not None:
        client.redis.rpush(wake, token)
    client.redis.config_resetstat()
    got = client.conn.call(ops.exchange("m1", outcomes, 1, ["q"]))
    assert got.states["complete"] == {leased.jid: "complete"}
    return [j.jid for j in got.popped.jobs]


def test_a_full_exchange_with_work_left_leaves_a_token(client: Client) -> None:
    q = client.queue("q")
    for i in range(4):
        q.put("app.jobs:run", {"n": i})
    assert len(exchange_one(client)) == 1
    assert commands(client)["exists"] == 1  # a master waits? (handoff.lua); K.prios: none
    assert wake_tokens(client) == 1
    assert q.counts()["waiting"] == 2


def test_a_full_exchange_that_takes_the_last_job_leaves_no_token(client: Client) -> None:
    q = client.queue("q")
    for i in range(2):
        q.put("app.jobs:run", {"n": i})
    assert len(exchange_one(client)) == 1
    assert commands(client)["exists"] == 1  # a master waits? (handoff.lua); K.prios: none
    assert wake_tokens(client) == 0
    assert q.counts()["waiting"] == 0


def test_a_full_exchange_with_the_token_there_reads_no_counters(client: Client) -> None:
    q = client.queue("q")
    for i in range(4):
        q.put("app.jobs:run", {"n": i})
    assert len(exchange_one(client, token="1")) == 1
    counted = commands(client)
    assert counted["hmget"] == 1  # the queue's due time (lib/due.lua), not its counters
    assert "zpopmin" not in counted  # no master waits: no hand-off tried
    assert client.redis.lrange(client.keys.key("wake", queue="q"), 0, -1) == [b"1"]


@pytest.mark.parametrize(
    ("jobs", "left"),
    [(4, b"1"), (2, b"at:1")],
    ids=["becomes-look-now-when-work-is-left", "stays-when-no-work-is-left"],
)
def test_a_later_token_after_a_full_exchange(client: Client, jobs: int, left: bytes) -> None:
    q = client.queue("q")
    for i in range(jobs):
        q.put("app.jobs:run", {"n": i})
    assert len(exchange_one(client, token="at:1")) == 1
    assert client.redis.lrange(client.keys.key("wake", queue="q"), 0, -1) == [left]


def test_a_master_waiting_on_the_queue_is_handed_the_job_left(client: Client) -> None:
    q = client.queue("q")
    for i in range(3):
        q.put("app.jobs:run", {"n": i})
    now_ms = client.conn.now_ms()
    client.redis.zadd(client.keys.key("idle", queue="q"), {"m2": now_ms})
    assert len(exchange_one(client, token="1")) == 1
    handed = client.redis.lrange(client.keys.worker_wake("m2"), 0, -1)
    assert len(handed) == 1
    assert q.counts()["waiting"] == 0
