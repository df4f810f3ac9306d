"""Concurrency caps over random histories (lib/domains.lua): random puts, pops,
completions, failures, retries, releases, lease expiries, cancels, limit
changes and pauses; after every step, each domain's slots in use equal its
jobs holding a lease, a pop never takes a domain over its cap, and a lane
held for a slot or a resume belongs to a domain that is full or paused (no
limiter stuck with room left)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import Client, LeaseLost, NoSuchJob
from tests.lua.test_due import fresh_client
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer

QUEUES = ("a", "b")
DOMAINS = ("d1", "d2")
WORKERS = ("w1", "w2")
HELD_US = 9e15  # lib/due.lua: Due.HELD

PUT = st.tuples(
    st.just("put"),
    st.sampled_from(QUEUES),
    st.sampled_from(("d1", "d1", "d2", None)),
    st.sampled_from([0, 0, 0, 0, 0.5, 3.0]),
    st.sampled_from([None, None, 1.0, 5.0]),
)
POP = st.tuples(
    st.just("pop"),
    st.sampled_from(WORKERS),
    st.sampled_from([("a",), ("b",), ("a", "b")]),
    st.integers(1, 4),
)
REPORT = st.tuples(
    st.just("report"), st.sampled_from(["complete", "fail", "retry", "release"]), st.integers(0, 9)
)
OPS = st.one_of(
    PUT,
    PUT,
    PUT,
    POP,
    POP,
    POP,
    REPORT,
    REPORT,
    st.tuples(st.just("advance"), st.sampled_from([0.1, 1.0, 5.0, 61.0])),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(
        st.just("limit"),
        st.sampled_from(DOMAINS),
        st.sampled_from([None, 1, 2, 3]),
        st.sampled_from([None, None, 2]),
    ),
    st.tuples(st.just("pause"), st.sampled_from(DOMAINS), st.booleans()),
)


class Run:
    def __init__(self, client: Client, clock: FrozenClock) -> None:
        self.client, self.clock = client, clock
        self.held: list[tuple[str, str, str]] = []
        self.jids: list[str] = []
        self.caps: dict[str, int | None] = dict.fromkeys(DOMAINS)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        getattr(self, kind)(*args)

    def put(self, queue: str, domain: str | None, delay: float, expires: float | None) -> None:
        jid = self.client.queue(queue).put(
            "a.b:c", {}, domain=domain, delay=delay, expires_in=expires, retries=1
        )
        self.jids.append(jid)

    def pop(self, worker: str, queues: tuple[str, ...], count: int) -> None:
        before = self.slots()
        reply: dict[str, Any] = self.client.conn.run_json(
            "pop", worker, count, "seed", "ordered", 0, 0, *queues
        )
        for job in reply["jobs"]:
            self.held.append((job["jid"], worker, job["meta"]["l"]))
        after = self.slots()
        for domain, cap in self.caps.items():
            if cap is not None and after[domain] > before[domain]:
                assert after[domain] <= cap, (domain, before[domain], after[domain], cap)

    def report(self, how: str, i: int) -> None:
        if not self.held:
            return
        jid, worker, token = self.held.pop(i % len(self.held))
        leases = self.client.leases
        with contextlib.suppress(LeaseLost, NoSuchJob):
            if how == "complete":
                leases.complete(jid, worker, token)
            elif how == "fail":
                leases.fail(jid, worker, token, "G", "failed")
            elif how == "retry":
                leases.retry(jid, worker, token, "G", "again", delay=0)
            else:
                leases.release(jid, worker, token)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def cancel(self, i: int) -> None:
        if self.jids:
            self.client.cancel(self.jids[i % len(self.jids)])

    def limit(self, domain: str, cap: int | None, rate: int | None) -> None:
        self.caps[domain] = cap
        if cap is None and rate is None:
            self.client.conn.run("domain_limit", domain, "")
        else:
            self.client.set_domain_limit(domain, rate=rate, concurrency=cap)

    def pause(self, domain: str, paused: bool) -> None:
        if paused:
            self.client.scheduling.pause_domain(domain)
        else:
            self.client.scheduling.resume_domain(domain)

    # --- what is checked --------------------------------------------------------

    def slots(self) -> dict[str, int]:
        raw: Any = self.client.redis.hgetall(self.client.keys.key("domain_slots"))
        got = {k.decode(): int(v) for k, v in raw.items()}
        assert all(n > 0 for n in got.values()), f"a slot count at zero or below is kept: {got}"
        return {d: got.get(d, 0) for d in DOMAINS}

    def leased(self) -> dict[str, int]:
        counts = dict.fromkeys(DOMAINS, 0)
        for queue in QUEUES:
            key = self.client.keys.key("running", queue=queue)
            found: Any = self.client.redis.zrange(key, 0, -1)
            for jid in found:
                job = self.client.get_job(jid.decode())
                assert job is not None and job.state == "running"
                if job.domain:
                    counts[job.domain] += 1
        return counts

    def check(self) -> None:
        slots = self.slots()
        assert slots == self.leased()
        limits = self.client.scheduling.domain_limits()
        for queue in QUEUES:
            key = self.client.keys.key("throttled", queue=queue)
            lanes: Any = self.client.redis.zrange(key, 0, -1, withscores=True)
            for lane, score in lanes:
                domain = lane.decode().split("|", 1)[1]
                if score < HELD_US:
                    continue
                own = limits.get(domain, {})
                cap = own.get("concurrency")
                full = cap is not None and slots[domain] >= cap
                assert full or own.get("paused"), f"{queue} {domain} held with room: {own}"


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=5, max_size=50))
@example(  # a slot freed under a full cap readies the held lane
    ops=[("put", "a", "d1", 0, None)] * 3
    + [("pop", "w1", ("a",), 4), ("report", "complete", 0), ("pop", "w2", ("a", "b"), 4)]
)
def test_slots_in_use_equal_the_leased_jobs_and_never_pass_a_cap(
    redis_server: RedisServer, ops: list[tuple[Any, ...]]
) -> None:
    with fresh_client(redis_server) as (client, clock):
        run = Run(client, clock)
        run.limit("d1", 1, None)
        for op in ops:
            run.apply(op)
            run.check()


def test_the_record_of_a_capped_domain_is_plain_json(client: Client) -> None:
    client.set_domain_limit("d1", concurrency=2)
    raw = client.redis.hget(client.keys.key("domain_limits"), "d1")
    assert raw is not None and json.loads(raw) == {"concurrency": 2}
