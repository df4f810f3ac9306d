"""A queue's kept "next due" time (lib/due.lua) under a frozen clock: every writer
of the scheduled, throttled, running and recurring sets keeps it at or before the
earliest score in them, and a pop it lets skip its scans never leaves due work
behind: a scheduled job is never popped late because of it."""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import Client, LeaseLost, NoSuchJob, WrongState
from runtime.config import LIMITS
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer

QUEUES = ("a", "b")
WORKERS = ("w1", "w2")
SETS = ("scheduled", "throttled", "running", "recurring")


def pop(
    client: Client, worker: str, queues: tuple[str, ...], count: int = 1, ahead_us: int = 0
) -> dict[str, Any]:
    reply: dict[str, Any] = client.conn.run_json(
        "pop", worker, count, "seed", "ordered", ahead_us, 0, *queues
    )
    return reply


def first_score(client: Client, queue: str, name: str) -> float | None:
    key = client.keys.key(name, queue=queue)
    got: Any = client.redis.zrange(key, 0, 0, withscores=True)
    return got[0][1] if got else None


HELD = 9e15  # a held lane's score (lib/due.lua Due.HELD): a full or paused domain's, never due


def earliest(client: Client, queue: str) -> float:
    scores = [first_score(client, queue, name) for name in SETS]
    return min((s for s in scores if s is not None and s < HELD), default=math.inf)


def kept(client: Client, queue: str) -> float | None:
    """The queue's kept due time (us), inf for never, None when unknown."""
    raw = client.redis.hget(client.keys.queue(queue), "due")
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    return math.inf if text == "never" else float(text)


def check_kept(client: Client) -> None:
    for queue in QUEUES:
        due = kept(client, queue)
        if due is not None:
            assert due <= earliest(client, queue), (queue, due, earliest(client, queue))


def check_nothing_left_due(client: Client, queue: str, now_us: int, ahead_us: int) -> None:
    """After a pop of `queue` (not paused, no post-outage grace, small sets): nothing
    it should have taken, promoted, reclaimed, released or spawned is left."""
    bound_ms = now_us // 1000
    for name, horizon in (
        ("scheduled", bound_ms * 1000),
        ("throttled", now_us + ahead_us),
        ("running", now_us),
        ("recurring", now_us),
    ):
        first = first_score(client, queue, name)
        assert first is None or first > horizon, (queue, name, first, horizon)


@contextlib.contextmanager
def fresh_client(server: RedisServer) -> Iterator[tuple[Client, FrozenClock]]:
    c = Client.from_url(server.url, namespace="t" + uuid.uuid4().hex[:12])
    try:
        yield c, FrozenClock(c.redis, c.keys)
    finally:
        c.close()


queue_st = st.sampled_from(QUEUES)
worker_st = st.sampled_from(WORKERS)
delay_st = st.one_of(st.none(), st.sampled_from([0.001, 0.05, 0.5, 2.0, 30.0, 600.0]))
queues_st = st.sampled_from([("a",), ("b",), ("a", "b")])
reports_st = st.sampled_from(["complete", "fail", "retry", "release"])
OPS = st.one_of(
    st.tuples(st.just("put"), queue_st, delay_st, st.booleans()),
    st.tuples(
        st.just("pop"), worker_st, queues_st, st.integers(1, 3), st.sampled_from([0, 50_000])
    ),
    st.tuples(st.just("advance"), st.sampled_from([0.0005, 0.01, 0.06, 0.4, 1.5, 7.0, 45.0])),
    st.tuples(st.just("report"), reports_st, st.integers(0, 9), delay_st),
    st.tuples(st.just("heartbeat"), st.integers(0, 9)),
    st.tuples(st.just("heartbeat_config"), st.sampled_from([1, 5, 60])),
    st.tuples(st.just("domain_limit"), st.sampled_from([1, 2, 50]), st.sampled_from([1.0, 60.0])),
    st.tuples(st.just("domain_cap"), st.sampled_from([1, 2]), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("requeue"), st.integers(0, 30), queue_st),
    st.tuples(st.just("recur"), queue_st, st.sampled_from([0.5, 3.0, 90.0]), st.integers(0, 2)),
    st.tuples(st.just("unrecur"), st.integers(0, 2)),
    st.tuples(st.just("forget_worker"), worker_st),
    st.tuples(st.just("queue_forget"), queue_st),
)


class Run:
    """One example's client, clock and what it holds; `apply` runs one operation."""

    def __init__(self, client: Client, clock: FrozenClock) -> None:
        self.client, self.clock = client, clock
        self.held: list[tuple[str, str, str]] = []  # (jid, worker, token)
        self.jids: list[str] = []

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        getattr(self, kind)(*args)

    def put(self, queue: str, delay: float | None, domain: bool) -> None:
        jid = self.client.queue(queue).put(
            "a.b:c", {}, delay=delay or 0.0, domain="d.example" if domain else None, retries=2
        )
        self.jids.append(jid)

    def pop(self, worker: str, queues: tuple[str, ...], count: int, ahead_us: int) -> None:
        reply = pop(self.client, worker, queues, count, ahead_us)
        for job in reply["jobs"]:
            self.held.append((job["jid"], worker, job["meta"]["l"]))
        if len(reply["jobs"]) < count:  # a full pop may stop before the later queues
            for queue in queues:
                check_nothing_left_due(self.client, queue, self.clock.now_us, ahead_us)
        elif len(queues) == 1:
            check_nothing_left_due(self.client, queues[0], self.clock.now_us, ahead_us)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def report(self, how: str, i: int, delay: float | None) -> None:
        if not self.held:
            return
        jid, worker, token = self.held.pop(i % len(self.held))
        leases = self.client.leases
        with contextlib.suppress(LeaseLost, NoSuchJob):  # reclaimed, cancelled, requeued
            if how == "complete":
                leases.complete(jid, worker, token)
            elif how == "fail":
                leases.fail(jid, worker, token, "G", "failed")
            elif how == "retry":
                leases.retry(jid, worker, token, "G", "again", delay=delay)
            else:
                leases.release(jid, worker, token)

    def heartbeat(self, i: int) -> None:
        if self.held:
            jid, worker, token = self.held[i % len(self.held)]
            self.client.leases.heartbeat(worker, {jid: token})

    def heartbeat_config(self, seconds: int) -> None:
        self.client.admin.config_set("heartbeat", seconds)

    def domain_limit(self, rate: int, period: float) -> None:
        self.client.set_domain_limit("d.example", rate=rate, period=period)

    def domain_cap(self, cap: int, paused: bool) -> None:
        """A concurrency cap with the rate (full lanes wait for no time), or a pause."""
        self.client.set_domain_limit("d.example", rate=1, period=1.0, concurrency=cap)
        if paused:
            self.client.scheduling.pause_domain("d.example")

    def cancel(self, i: int) -> None:
        if self.jids:
            self.client.cancel(self.jids[i % len(self.jids)])

    def requeue(self, i: int, queue: str) -> None:
        if self.jids:
            with contextlib.suppress(WrongState, NoSuchJob):
                self.client.scheduling.requeue(self.jids[i % len(self.jids)], queue)

    def recur(self, queue: str, every: float, n: int) -> None:
        self.client.scheduling.recur(queue, "a.b:c", every=every, id=f"r{n}", policy="all")

    def unrecur(self, n: int) -> None:
        self.client.scheduling.unrecur(f"r{n}")

    def forget_worker(self, worker: str) -> None:
        self.client.conn.run("forget_worker", worker, *QUEUES)

    def queue_forget(self, queue: str) -> None:
        with contextlib.suppress(WrongState):  # not empty
            self.client.admin.queue_forget(queue)


SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}


def replay(server: RedisServer, ops: list[tuple[Any, ...]]) -> None:
    with fresh_client(server) as (client, clock):
        client.set_domain_limit("d.example", rate=1, period=1.0)  # a start a second
        run = Run(client, clock)
        for op in ops:
            run.apply(op)
            check_kept(client)


@settings(max_examples=50, **SETTINGS)  # type: ignore[arg-type]
@given(ops=st.lists(OPS, min_size=1, max_size=40))
def test_the_kept_due_time_is_never_after_the_earliest_score(
    redis_server: RedisServer, ops: list[tuple[Any, ...]]
) -> None:
    replay(redis_server, ops)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@settings(max_examples=1000, **SETTINGS)  # type: ignore[arg-type]
@given(ops=st.lists(OPS, min_size=1, max_size=60))
def test_the_kept_due_time_is_never_after_the_earliest_score_over_long_histories(
    redis_server: RedisServer, ops: list[tuple[Any, ...]]
) -> None:
    replay(redis_server, ops)


def test_a_pop_after_an_earlier_put_is_not_late(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="late", delay=60)
    assert pop(client, "w", ("q",))["jobs"] == []  # scanned: due kept at +60 s
    assert kept(client, "q") == clock.now_us + 60_000_000
    q.put("a.b:c", {}, jid="soon", delay=0.005)
    assert kept(client, "q") == clock.now_us + 5000, "the put lowered it"
    clock.advance(0.005)
    assert [j["jid"] for j in pop(client, "w", ("q",))["jobs"]] == ["soon"]


def ranges_of_one_pop(client: Client, expect: str) -> tuple[int, int]:
    """The ZRANGEBYSCORE and the ZRANGE commands of one pop of queue q, which leases
    `expect` (a promotion reads the earliest scheduled job with ZRANGE first)."""
    client.redis.config_resetstat()
    [job] = pop(client, "w", ("q",))["jobs"]
    stats: dict[str, Any] = client.redis.info("commandstats")
    assert job["jid"] == expect
    client.leases.complete(job["jid"], "w", job["meta"]["l"])
    by_score, ranges = (
        int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("zrangebyscore", "zrange")
    )
    return by_score, ranges


def test_a_quiet_pop_skips_the_scans(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="later", delay=60)
    for i in range(4):
        q.put("a.b:c", {}, jid=f"now{i}")
    scanned = ranges_of_one_pop(client, "now0")  # no due time kept yet
    clock.advance(0.001)  # within due_recheck_ms of that pop's scan
    quiet = ranges_of_one_pop(client, "now1")
    # (the sweep of old tombstones, lib/retention.lua, goes with the scans)
    assert scanned[0] - quiet[0] == 4, "recurrences, reclaim, release, tombstones: skipped"
    # the promotion's look at the earliest scheduled job, and the four next-due
    # reads of a pop that filled its room
    assert scanned[1] - quiet[1] == 5, "promote and the next-due reads: skipped"
    clock.advance(LIMITS["due_recheck_ms"] / 1000)
    assert ranges_of_one_pop(client, "now2") == scanned, "scans again once a recheck is due"
    clock.advance(60)
    jobs = pop(client, "w", ("q",), count=10)["jobs"]
    assert [j["jid"] for j in jobs] == ["now3", "later"]


def test_a_writer_that_does_not_keep_it_delays_by_at_most_the_recheck(
    client: Client, clock: FrozenClock
) -> None:
    """An older release's put (here: a bare ZADD) does not lower the kept time; the
    pops scan again within due_recheck_ms anyway."""
    q = client.queue("q")
    q.put("a.b:c", {}, jid="later", delay=60)
    q.put("a.b:c", {}, jid="now")
    assert [j["jid"] for j in pop(client, "w", ("q",))["jobs"]] == ["now"]
    q.put("a.b:c", {}, jid="old", delay=30)
    member: Any = client.redis.zrange(client.keys.key("scheduled", queue="q"), 0, 0)[0]
    client.redis.zadd(client.keys.key("scheduled", queue="q"), {member: clock.now_us})  # unkept
    client.redis.hset(client.keys.queue("q"), "due", str(clock.now_us + 60_000_000))
    assert pop(client, "w", ("q",))["jobs"] == [], "quiet: the kept time says +60 s"
    clock.advance(LIMITS["due_recheck_ms"] / 1000)
    assert [j["jid"] for j in pop(client, "w", ("q",))["jobs"]] == ["old"]


def test_an_idle_pop_still_learns_its_exact_wake_time(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="run")
    q.put("a.b:c", {}, jid="later", delay=600)
    [job] = pop(client, "w", ("q",))["jobs"]
    client.leases.complete("run", "w", job["meta"]["l"])  # its lease's time stays kept
    clock.advance(0.001)
    reply = pop(client, "w", ("q",))
    assert reply["jobs"] == [] and reply["wake_in_ms"] == 599_999.0


def test_a_throttled_lane_lowers_it(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("d.example", rate=1, period=10.0)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="later", delay=60)
    assert pop(client, "w", ("q",))["jobs"] == []
    q.put("a.b:c", {}, jid="d1", domain="d.example")
    q.put("a.b:c", {}, jid="d2", domain="d.example")
    [job] = pop(client, "w", ("q",))["jobs"]
    client.leases.complete(job["jid"], "w", job["meta"]["l"])
    assert kept(client, "q") == first_score(client, "q", "throttled") == clock.now_us + 10_000_000
    clock.advance(10)
    assert [j["jid"] for j in pop(client, "w", ("q",))["jobs"]] == ["d2"]
