"""Jobs completed and failed per minute, all queues together, kept in Redis by the
reports themselves (lib/stats.lua) and read by throughput.lua, under a frozen clock."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client
from tests.support.clock import START_US, FrozenClock

MINUTE_US = 60_000_000


def calls_of(client: Client, *commands: str) -> dict[str, int]:
    stats = client.redis.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in commands}


def test_completions_and_final_failures_are_counted_by_minute_across_queues_and_hours(
    client: Client, clock: FrozenClock
) -> None:
    clock.set(START_US + 59 * MINUTE_US)  # the last minute of an hour (START_US is on one)
    client.admin.config_set("q-heartbeat", 1)
    a, b, q = client.queue("a"), client.queue("b"), client.queue("q")
    for i in range(3):
        a.put("a.b:c", {}, jid=f"a{i}", retries=1)
    b.put("a.b:c", {}, jid="b0")
    q.put("a.b:c", {}, jid="expires", retries=0)
    jobs = a.pop(3, worker="w")
    client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs[:2]})
    b.pop(1, worker="w")[0].complete()
    jobs[2].fail("g", "for good")
    q.pop(1, worker="w")

    clock.advance(61)  # the next hour's first minute
    q.pop(1, worker="w")  # the lease ran out and no retry was left: failed for good
    a.put("a.b:c", {}, jid="retried", retries=1)
    a.pop(1, worker="w")[0].retry("g", "again", delay=0)  # not final: not counted
    clock.advance(120)
    a.pop(1, worker="w")[0].complete()

    seen = client.admin.throughput(5)
    assert seen.now_ms == clock.now_ms
    assert seen.from_ms == (START_US + 58 * MINUTE_US) // 1000
    assert seen.completed == (0, 3, 0, 0, 1)
    assert seen.failed == (0, 1, 1, 0, 0)
    assert seen.minutes()[1] == ((START_US + 59 * MINUTE_US) // 1000, 3, 1)
    totals = client.status("a", "b", "q")
    assert sum(int(c["completed_total"]) for c in totals.values()) == sum(seen.completed)
    assert sum(int(c["failed_total"]) for c in totals.values()) == sum(seen.failed)


def test_a_minute_counts_a_call_with_one_command_whatever_it_reported(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i in range(12):
        q.put("a.b:c", {}, jid=f"j{i}")
    jobs = q.pop(12, worker="w")
    jobs[0].complete()  # the minute's first report: its field is new
    hour_key = client.keys.key("throughput", hour=START_US // (60 * MINUTE_US))
    assert 24 * 3600 < client.redis.ttl(hour_key) <= 25 * 3600

    client.redis.config_resetstat()
    jobs[1].complete()
    one = calls_of(client, "hincrby", "expire")
    client.redis.config_resetstat()
    client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs[2:]})
    ten = calls_of(client, "hincrby", "expire")
    assert ten == one  # nothing paid per job
    # no expiry per call: the hour's is set by its minute's first report, the day's
    # statistics' by the call that made the field (the first report's, same bucket)
    assert one["expire"] == 0
    assert client.admin.throughput(1).completed == (12,)


def test_a_call_that_completes_and_fails_counts_both_in_the_minute(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="done")
    q.put("a.b:c", {}, jid="refused")
    jobs = {j.jid: j for j in q.pop(2, worker="w")}
    bad_put = '{"puts": [["not json", "{}"]]}'
    client.conn.run(
        "complete",
        "w",
        "done",
        jobs["done"].token or "",
        "{}",
        "",
        "",
        "",
        "refused",
        jobs["refused"].token or "",
        bad_put,
        "",
        "",
        "",
    )
    assert client.get_job("refused").state == "failed"  # type: ignore[union-attr]
    minute = START_US // MINUTE_US
    hour_key = client.keys.key("throughput", hour=minute // 60)
    of_hour = minute % 60
    assert client.redis.hgetall(hour_key) == {
        f"c:{of_hour}".encode(): b"1",
        f"f:{of_hour}".encode(): b"1",
    }
    seen = client.admin.throughput(2)
    assert (seen.completed, seen.failed) == ((0, 1), (0, 1))


def test_minutes_are_read_at_most_a_kept_day_at_a_time(client: Client, clock: FrozenClock) -> None:
    assert len(client.admin.throughput(24 * 60).completed) == 24 * 60
    for bad in (0, 24 * 60 + 1, 1.5, True):
        with pytest.raises(BadArgument, match="minutes"):
            client.admin.throughput(bad)  # type: ignore[arg-type]
