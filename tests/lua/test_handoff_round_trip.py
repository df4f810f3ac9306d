"""The first lease of a job handed to a waiting master follows the round trip the
master stated when it registered (pop.lua's idle argument, handoff.lua): 1 s on
a fast link, handoff_round_trips round trips on a slow one, never more than
handoff_lease_max_ms nor the queue's heartbeat; a dead slow master holds its job
up for that lease, and no longer. Under a frozen clock."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime import Client, config
from runtime.errors import BadArgument
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from tests.support.clock import FrozenClock

S = 1_000_000
LEASE_MAX_MS = config.LIMITS["handoff_lease_max_ms"]


def register(client: Client, worker: str, rtt_ms: int, queue: str = "q") -> dict[str, Any]:
    """A master's pop that comes back short: it waits, stating `rtt_ms`."""
    reply: dict[str, Any] = client.conn.run_json(
        "pop", worker, 2, "seed", "ordered", 0, rtt_ms, queue
    )
    return reply


def handed(client: Client, worker: str) -> list[dict[str, Any]]:
    key = client.keys.key("worker_wake", worker=worker)
    return [json.loads(raw) for raw in client.redis.lrange(key, 0, -1)]


def scores(client: Client, queue: str = "q") -> dict[str, float]:
    pairs: list[tuple[bytes, float]] = client.redis.zrange(  # type: ignore[assignment]
        client.keys.key("idle", queue=queue), 0, -1, withscores=True
    )
    return {member.decode(): score for member, score in pairs}


def first_lease_us(client: Client, clock: FrozenClock, worker: str) -> int:
    [reply] = handed(client, worker)
    lease: int = reply["expires_us"] - clock.now_us
    return lease


@pytest.mark.parametrize(
    ("rtt_ms", "lease_s"),
    [
        (1, 1.0),  # a fast link: the short first lease of old
        (250, 1.0),  # handoff_round_trips (4) of them fit in 1 s
        (251, 1.1),  # in whole tenths of a second, rounded up
        (600, 2.4),
        (2_500, 10.0),
        (60_000, 10.0),  # at most handoff_lease_max_ms
    ],
)
def test_the_first_lease_follows_the_stated_round_trip(
    client: Client, rtt_ms: int, lease_s: float
) -> None:
    clock = FrozenClock(client.redis, client.keys)
    register(client, "m1", rtt_ms)
    client.queue("q").put("app.jobs:run", {})
    assert first_lease_us(client, clock, "m1") == round(lease_s * S)


def test_a_fast_master_s_registration_is_the_time_alone(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    register(client, "fast", 3)
    register(client, "slow", 600)
    now_ms = clock.now_ms
    assert scores(client) == {"fast": now_ms, "slow": now_ms + 24 / 128}


def test_the_first_lease_is_never_longer_than_the_queue_s_heartbeat(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    client.admin.config_set("q-heartbeat", 2)
    register(client, "m1", 1_000)  # would be 4 s
    client.queue("q").put("app.jobs:run", {})
    assert first_lease_us(client, clock, "m1") == 2 * S


def test_a_dead_slow_master_holds_its_job_up_for_its_first_lease_only(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    register(client, "slow", 600)
    clock.advance(0.1)
    register(client, "fast", 1)
    jid = client.queue("q").put("app.jobs:run", {})
    assert [r["jid"] for r in handed(client, "slow")] == [jid], "the longest waiting"
    token = client.redis.lindex(client.keys.key("wake", queue="q"), 0)
    assert token == f"at:{clock.now_us + 24 * S // 10}".encode(), "fast looks when it ends"
    clock.advance(2.399)
    assert client.queue("q").pop(1, worker="fast") == [], "still slow's"
    clock.advance(0.002)  # slow died: it never renewed
    [job] = client.queue("q").pop(1, worker="fast")
    assert job.jid == jid
    assert [e.event for e in job.job.history] == ["put", "popped", "lease-lost", "popped"]


def test_the_earliest_first_lease_given_is_the_token_s_time(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    register(client, "slow", 600)
    clock.advance(0.1)
    register(client, "fast", 1)
    clock.advance(0.1)
    register(client, "third", 1)
    q = client.queue("q")
    client.put_many([q.spec("app.jobs:run", {}), q.spec("app.jobs:run", {})])
    assert len(handed(client, "slow")) == len(handed(client, "fast")) == 1
    token = client.redis.lindex(client.keys.key("wake", queue="q"), 0)
    assert token == f"at:{clock.now_us + S}".encode()


def test_a_registration_kept_behind_a_domain_s_limit_keeps_its_first_lease(
    client: Client,
) -> None:
    clock = FrozenClock(client.redis, client.keys)
    client.set_domain_limit("slow.example", rate=1, period=60)
    register(client, "m1", 1)
    register(client, "m2", 600)
    q = client.queue("q")
    q.put("app.jobs:run", {}, domain="slow.example")
    q.put("app.jobs:run", {}, domain="slow.example")  # over the limit: m2 keeps waiting
    assert scores(client) == {"m2": clock.now_ms + 24 / 128}
    clock.advance(60)
    register(client, "m2", 600)  # registered again, as a waiting master does
    q.put("app.jobs:run", {})
    assert first_lease_us(client, clock, "m2") == 24 * S // 10


def test_the_python_side_states_the_round_trip_in_ms(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    client.conn.call(ops.pop("m1", 2, ["q"], idle=True, rtt_s=0.6))
    client.conn.call(ops.exchange("m2", Outcomes(), 2, ["q2"], idle=True, rtt_s=0.0001))
    assert scores(client) == {"m1": clock.now_ms + 24 / 128}
    assert scores(client, "q2") == {"m2": clock.now_ms}, "at least 1 ms: it waits"
    client.conn.call(ops.pop("m3", 2, ["q3"], idle=True, rtt_s=3600.0))
    client.queue("q3").put("app.jobs:run", {})
    assert first_lease_us(client, clock, "m3") == LEASE_MAX_MS * 1000, "capped"


@pytest.mark.parametrize("idle", [-1, 60_001, 1.5, "fast", ""])
def test_a_malformed_round_trip_is_refused_before_any_write(client: Client, idle: object) -> None:
    FrozenClock(client.redis, client.keys)
    client.queue("q").put("app.jobs:run", {})
    ours = client.keys.root + ":*"  # the server is shared: other tests' keys come and go
    before = sorted(client.redis.keys(ours))
    for args in (
        ("pop", "m1", 2, "seed", "ordered", 0, idle, "q"),
        ("exchange", "m1", 2, "seed", "ordered", 0, idle, 0, 0, 0, "q"),
    ):
        with pytest.raises(BadArgument, match="idle"):
            client.conn.run(*args)
    assert sorted(client.redis.keys(ours)) == before
    assert scores(client) == {}
