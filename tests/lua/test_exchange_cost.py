"""What a master's exchange of one job asks of Redis, counted: the pop that saw
its queue's priorities (lanes.lua) learns from that read that the set exists,
so a full pop's wake-up check makes no EXISTS; the wake-up token is left (or
not) as before."""

from __future__ import annotations

from runtime import Client
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from tests.lua.test_put_cost import commands, wake_tokens


def exchange_one(client: Client) -> list[str]:
    """Pops a job of `q`, then completes it in an exchange that pops one more:
    the jids the exchange popped."""
    [leased] = client.queue("q").pop(1, worker="m1")
    outcomes = Outcomes()
    outcomes.add_complete(leased.jid, leased.token or "")
    client.redis.delete(client.keys.key("wake", queue="q"))
    client.redis.config_resetstat()
    got = client.conn.call(ops.exchange("m1", outcomes, 1, ["q"]))
    assert got.states["complete"] == {leased.jid: "complete"}
    return [j.jid for j in got.popped.jobs]


def test_a_full_exchange_with_work_left_reads_no_exists_and_leaves_a_token(
    client: Client,
) -> None:
    q = client.queue("q")
    for i in range(4):
        q.put("app.jobs:run", {"n": i})
    assert len(exchange_one(client)) == 1
    assert "exists" not in commands(client)
    assert wake_tokens(client) == 1
    assert q.counts()["waiting"] == 2


def test_a_full_exchange_that_takes_the_last_job_leaves_no_token(client: Client) -> None:
    q = client.queue("q")
    for i in range(2):
        q.put("app.jobs:run", {"n": i})
    assert len(exchange_one(client)) == 1
    assert "exists" not in commands(client)
    assert wake_tokens(client) == 0
    assert q.counts()["waiting"] == 0
