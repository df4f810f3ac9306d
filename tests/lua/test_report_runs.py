"""A report of many jobs pays some reads and writes once for all of them
(lib/report.lua): whether any job waits on them (one EXISTS), their worker's
set (one SADD or SREM). Each job still answers as it would alone: these replay
calls where what the first jobs do changes what the later ones must find."""

from __future__ import annotations

from runtime import Client
from runtime.errors import LeaseLost
from runtime.queue import ops, wire
from runtime.queue.leases import CompleteRow
from tests.support.clock import FrozenClock


def held(client: Client, worker: str) -> set[str]:
    key = client.keys.key("worker_jobs", worker=worker)
    return {m.decode() if isinstance(m, bytes) else m for m in client.redis.smembers(key)}


def test_a_job_put_by_an_early_completion_waits_on_a_later_one_and_is_released(
    client: Client,
) -> None:
    q = client.queue("q")
    for jid in ("a", "b", "c"):
        q.put("a.b:c", {}, jid=jid)
    leases = {j.jid: j.token or "" for j in q.pop(3, worker="w")}
    assert held(client, "w") == {"a", "b", "c"}
    child = q.spec("a.b:c", {}, jid="child", depends=["b"])
    rows = [
        CompleteRow("a", leases["a"], wire.report_options(None, [child.to_wire()]), "", ""),
        CompleteRow("b", leases["b"], "{}", "", ""),
        CompleteRow("c", leases["c"], "{}", "", ""),
    ]
    assert client.conn.call(ops.complete("w", rows)) == {
        "a": "complete",
        "b": "complete",
        "c": "complete",
    }
    assert client.get_job("child").state == "waiting"  # type: ignore[union-attr]
    assert client.redis.exists(client.keys.key("dependents", jid="b")) == 0
    assert held(client, "w") == set()


def test_a_run_over_two_queues_fences_each_job_by_its_own_lease(
    client: Client, clock: FrozenClock
) -> None:
    slow, fast = client.queue("slow"), client.queue("fast")
    fast.put("a.b:c", {}, jid="f1")
    slow.put("a.b:c", {}, jid="s1")
    slow.put("a.b:c", {}, jid="s2")
    leases = {j.jid: j.token or "" for j in fast.pop(1, worker="w")}
    clock.advance(61)  # f1's lease ran out; s1 and s2 are leased now
    leases |= {j.jid: j.token or "" for j in slow.pop(2, worker="w")}
    got = client.leases.complete_many("w", {"s1": leases["s1"], "f1": leases["f1"],
                                             "s2": leases["s2"]})  # fmt: skip
    assert got["s1"] == got["s2"] == "complete"
    assert isinstance(got["f1"], LeaseLost)
    assert client.get_job("f1").state == "running"  # type: ignore[union-attr]
    assert held(client, "w") == {"f1"}  # until a pop reclaims it


def test_a_job_named_twice_in_one_run_completes_once_and_answers_twice(client: Client) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="a")
    q.put("a.b:c", {}, jid="b")
    leases = {j.jid: j.token or "" for j in q.pop(2, worker="w")}
    rows = [CompleteRow(jid, leases[jid], "{}", "", "") for jid in ("a", "b", "a")]
    assert client.conn.call(ops.complete("w", rows)) == {"a": "complete", "b": "complete"}
    history = [e.event for e in client.get_job("a").history]  # type: ignore[union-attr]
    assert history.count("completed") == 1
    assert held(client, "w") == set()
