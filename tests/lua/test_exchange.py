"""A master's exchange (lua/exchange.lua) is its reports, then its pop, in one
call: the same timeline replayed once with complete, retry, fail and pop called
one after the other, and once with one exchange, ends in the same records, the
same replies and the same keys, lost leases, unknown jobs and corrupt records
included. An exchange sent again (its reply lost) completes nothing twice."""

from __future__ import annotations

from typing import Any

from runtime import Client
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from tests.conftest import record, snapshot
from tests.lua.test_corrupt import RECORD_KINDS, corrupt
from tests.support.clock import START_US, FrozenClock

POP = ("m", 3, "seed2", "ordered", 0, 1)  # worker, count, seed, order, ahead_us, idle


def fresh(client: Client, clock: FrozenClock, history_count: int = 1) -> dict[str, str]:
    """An empty namespace with eight jobs, five of them leased to master m
    (tokens by jid), under the frozen clock at its start; one job completed
    before, and retention keeping `history_count` completed jobs."""
    for key in list(client.redis.scan_iter(match=client.keys.root.replace("{", "[{]")
                                           .replace("}", "[}]") + ":*")):  # fmt: skip
        client.redis.delete(key)
    clock.set(START_US)
    client.admin.config_set("jobs-history-count", history_count)
    queue = client.queue("q")
    queue.put("a.b:c", {}, jid="old")
    [old] = queue.pop(1, worker="m")
    old.complete()
    clock.advance(1)
    for i in range(1, 9):
        queue.put("a.b:c", {"i": i}, jid=f"j{i}")
    clock.advance(1)
    popped = client.conn.run_json("pop", "m", 5, "seed1", "ordered", 0, 1, "q")
    clock.advance(2)
    return {job["jid"]: job["meta"]["l"] for job in popped["jobs"]}


def reports(tokens: dict[str, str]) -> tuple[list[Any], list[Any], list[Any]]:
    """Completions (one with a lost lease, one of no job, one with a note), a
    retry and a failure (of a corrupt record)."""
    complete = [
        ("j1", tokens["j1"], "{}", '{"r":1}', "out", "0.0120 40.5"),
        ("j2", "0" * 24, "{}", "", "", ""),  # not its token: LEASE_LOST
        ("nosuch", "0" * 24, "{}", "", "", ""),
        ("j3", tokens["j3"], '{"note":"n"}', "", "", ""),
    ]
    retry = [("j4", tokens["j4"], "g", "m", 0, "", "1.5 300.0")]
    fail = [("j5", tokens["j5"], "g", "boom", "", "0.5 20.0 c")]
    return complete, retry, fail


def flat(rows: list[Any]) -> list[Any]:
    return [value for row in rows for value in row]


def one_by_one(client: Client, tokens: dict[str, str]) -> dict[str, Any]:
    complete, retry, fail = reports(tokens)
    run = client.conn.run_json
    return {
        "complete": run("complete", "m", *flat(complete)),
        "retry": run("retry", "m", *flat(retry)),
        "fail": run("fail", "m", *flat(fail)),
        "pop": run("pop", *POP, "q"),
    }


def together(client: Client, tokens: dict[str, str]) -> dict[str, Any]:
    complete, retry, fail = reports(tokens)
    counts = (len(complete), len(retry), len(fail))
    args = (*POP, *counts, *flat(complete), *flat(retry), *flat(fail), "q")
    reply: dict[str, Any] = client.conn.run_json("exchange", *args)
    return reply


def state(client: Client) -> dict[bytes, Any]:
    """Every key of the namespace with its value as read (not DUMPed: a hash's
    fields may come in another order when the statistics are written once)."""
    r = client.redis
    out: dict[bytes, Any] = {}
    for key in snapshot(client):
        kind = r.type(key)
        if kind == b"hash":
            value: Any = r.hgetall(key)
        elif kind == b"zset":
            value = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            value = r.smembers(key)
        elif kind == b"list":
            value = r.lrange(key, 0, -1)
        else:
            value = r.get(key)
        out[key] = (kind, value, r.pttl(key) > 0)
    return out


def test_an_exchange_ends_as_its_reports_then_its_pop_would(
    client: Client, clock: FrozenClock
) -> None:
    expected = one_by_one(client, fresh(client, clock))
    after = state(client)
    got = together(client, fresh(client, clock))
    assert got == expected
    assert state(client) == after
    states = {item["jid"]: item.get("state", item.get("error")) for item in got["complete"]}
    assert states == {"j1": "complete", "j2": "LEASE_LOST", "nosuch": "NO_SUCH_JOB",
                      "j3": "complete"}  # fmt: skip
    assert [j["jid"] for j in got["pop"]["jobs"]] == ["j6", "j7", "j8"]
    # retention (jobs-history-count 1) kept the last completed job only
    assert record(client, "old") is None and record(client, "j1") is None
    assert record(client, "j3")[0]["s"] == "complete"  # type: ignore[index]


def test_a_corrupt_record_in_an_exchange_fails_that_job_only(
    client: Client, clock: FrozenClock
) -> None:
    kind = RECORD_KINDS[next(iter(RECORD_KINDS))]
    tokens = fresh(client, clock)
    corrupt(client, "j5", kind)
    expected = one_by_one(client, tokens)
    after = state(client)
    tokens = fresh(client, clock)
    corrupt(client, "j5", kind)
    got = together(client, tokens)
    assert got == expected
    assert state(client) == after
    [failed] = got["fail"]
    assert failed["error"] == "LEASE_LOST" and "CorruptJob" in failed["message"]
    assert record(client, "j3")[0]["s"] == "complete"  # type: ignore[index]
    assert len(got["pop"]["jobs"]) == 3


def test_an_exchange_sent_again_after_a_lost_reply_completes_nothing_twice(
    client: Client, clock: FrozenClock
) -> None:
    tokens = fresh(client, clock, history_count=100)
    first = together(client, tokens)
    totals = client.redis.hmget(client.keys.queue("q"), "total:completed", "total:failed",
                                "total:retried")  # fmt: skip
    reported = ["j1", "j2", "j3", "j5"]  # j4 was retried: the next pop may lease it
    records = {jid: record(client, jid) for jid in reported}
    leased_by_lost = [j["jid"] for j in first["pop"]["jobs"]]
    again = together(client, tokens)  # the master never saw `first`
    assert again["complete"] == first["complete"]
    assert again["retry"] == first["retry"] == [{"jid": "j4", "ok": True, "state": "waiting"}]
    assert again["fail"] == first["fail"] == [{"jid": "j5", "ok": True, "state": "failed"}]
    assert client.redis.hmget(client.keys.queue("q"), "total:completed", "total:failed",
                              "total:retried") == totals  # fmt: skip
    assert {jid: record(client, jid) for jid in reported} == records
    assert record(client, "j4")[0]["a"] == 2  # type: ignore[index]  # retried once, not twice
    # the lost pop's jobs stay leased to m; the retried pop takes what is left
    for jid in leased_by_lost:
        assert record(client, jid)[0]["s"] == "running"  # type: ignore[index]
    assert {j["jid"] for j in again["pop"]["jobs"]}.isdisjoint(leased_by_lost)
    # and they come back when their leases run out
    clock.advance(3600)
    reclaimed = client.conn.run_json("pop", "other", 10, "seed3", "ordered", 0, 0, "q")
    assert set(leased_by_lost) <= {j["jid"] for j in reclaimed["jobs"]}


def test_the_master_sends_an_exchange_with_its_reports_and_a_pop(
    client: Client, clock: FrozenClock
) -> None:
    tokens = fresh(client, clock)
    outcomes = Outcomes()
    outcomes.add_complete("j1", tokens["j1"], result='{"r":1}')
    outcomes.add_retry("j4", tokens["j4"], "g", "m", 0)
    outcomes.add_fail("j5", tokens["j5"], "g", "boom")
    outcomes.add_complete("j2", "0" * 24)
    done = client.conn.call(ops.exchange("m", outcomes, 2, ["q"], idle=True))
    assert {k: {j: str(s) if not isinstance(s, str) else s for j, s in v.items()}
            for k, v in done.states.items()}["complete"]["j1"] == "complete"  # fmt: skip
    assert done.states["retry"] == {"j4": "waiting"}
    assert done.states["fail"] == {"j5": "failed"}
    assert type(done.states["complete"]["j2"]).__name__ == "LeaseLost"
    assert [job.jid for job in done.popped.jobs] == ["j6", "j7"]
