"""What a put of one job asks of Redis, counted: a plain put into a queue with
waiting jobs and no master waiting makes eleven commands, three of them writes
(the lane, the queue's counters in one HSET, the record). One is a read of
compact records, on by default where no master of an earlier release is
registered: the number of the job's queue and klass (one HGET of the names
hash). Whether such a master is registered is the server's own finding while
it lasts (lib/job.lua); a server that runs the scripts by EVALSHA (6.2) keeps
nothing between calls and reads the kept finding (one GET more). The hand-off at its
end learns from the put itself that a job is ready, and reads no counters
unless a master waits. A call that also took jobs out of a lane learns it
from the counters, as before, and leaves no wake-up token for nothing."""

from __future__ import annotations

from runtime import Client
from runtime.queue import ops
from runtime.queue.leases import Outcomes

# commands of the harness itself, not of the puts
HARNESS = {"info", "config|resetstat", "config", "fcall", "evalsha", "hello", "client|setinfo"}


def commands(client: Client) -> dict[str, int]:
    stats = client.redis.info("commandstats")
    counts = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {name: n for name, n in counts.items() if name not in HARNESS}


def wake_tokens(client: Client, queue: str = "q") -> int:
    return int(client.redis.llen(client.keys.key("wake", queue=queue)))


def test_a_plain_put_makes_eleven_commands_three_of_them_writes(client: Client) -> None:
    q = client.queue("q")
    q.put("app.jobs:run", {"n": 0})  # the lane and the queue's listing exist now
    client.redis.config_resetstat()
    n = 5
    for i in range(n):
        q.put("app.jobs:run", {"n": i + 1})
    per_put = {name: calls / n for name, calls in commands(client).items()}
    evalsha = int(str(client.redis.info("server")["redis_version"]).split(".")[0]) < 7
    assert per_put.pop("get", 0) == (1 if evalsha else 0)  # the kept record forms
    assert per_put == {
        "hgetall": 1,  # config
        "hget": 1,  # the number of its (queue, klass) pair in the names hash
        "time": 1,
        "hexists": 1,  # the jid is free
        "zrange": 1,  # the earliest scheduled job: none due
        "hmget": 1,  # seq and queued
        "rpush": 1,  # the lane
        "hset": 2,  # seq and queued; the record
        "exists": 1,  # no master waits on the queue
        "lindex": 1,  # the wake-up token is there
    }
    assert wake_tokens(client) == 1
    assert client.redis.hget(client.keys.queue("q"), "queued") == b"6"
    assert q.counts()["waiting"] == 6


def test_a_put_into_an_empty_lane_lists_its_queue_again(client: Client) -> None:
    q = client.queue("q")
    jid = q.put("app.jobs:run", {})
    client.cancel(jid)
    assert client.admin.queue_forget("q")
    assert client.redis.zscore(client.keys.key("queues"), "q") is None
    q.put("app.jobs:run", {})
    assert client.redis.zscore(client.keys.key("queues"), "q") is not None


def test_a_call_that_puts_and_takes_the_job_leaves_no_token(client: Client) -> None:
    """An exchange completes a job with a put into `q`, then pops `q` and takes
    the job it put: the queue has nothing ready when the call ends, so no wake-up
    token may be left (the put alone would have told the hand-off a job is ready)."""
    q, other = client.queue("q"), client.queue("other")
    other.put("app.jobs:run", {})
    [leased] = other.pop(1, worker="m1")
    client.redis.delete(client.keys.key("wake", queue="q"))
    outcomes = Outcomes()
    spec = q.spec("app.jobs:next", jid="next")
    outcomes.add_complete(leased.jid, leased.token or "", puts=[spec.to_wire()])
    got = client.conn.call(ops.exchange("m1", outcomes, 1, ["q"]))
    assert [j.jid for j in got.popped.jobs] == ["next"]
    assert q.counts()["waiting"] == 0
    assert wake_tokens(client) == 0
