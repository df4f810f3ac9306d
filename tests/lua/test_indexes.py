"""Every job sits in exactly the one index its record names, checked after every
step of random operation sequences through the real scripts under a frozen clock.

The indexes of a queue: its lanes (waiting and throttled jobs), `scheduled`,
`running`, `depends`, `complete` and `failed`. A record's state names one of
them; the queue's counts are their sizes; a running job's worker lists it among
its jobs and no worker lists a job it does not hold; a failed job is in its
group's list, and each group's count is its list's length; a queue holding a
job that has not ended is listed among the queues. `check_indexes` reads all of
it with plain commands (a test may scan its own namespace; scripts never do),
so a writer of a state that forgets an index, or leaves a job behind in one,
fails here whichever script it is (lua/lib/place.lua's Place.to_<state> are
the only writers: tests/unit/test_lua_one_writer.py). A planted bug, a move
into depends that forgets to list its queue, proves the check finds one.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from runtime import Client
from runtime.errors import BadArgument, DependedOn, NoSuchJob, WrongState
from runtime.queue import scripts
from runtime.vocabulary import FailureGroup, JobState
from tests.lua.test_due import OPS, QUEUES, Run, fresh_client
from tests.support.redis_server import RedisServer

# The index a stored state puts a job in (a throttled job is a waiting one in a lane).
INDEX_OF = {
    JobState.WAITING: "lane",
    JobState.THROTTLED: "lane",
    JobState.SCHEDULED: "scheduled",
    JobState.RUNNING: "running",
    JobState.DEPENDS: "depends",
    JobState.COMPLETE: "complete",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",  # a tombstone (lua/lib/place.lua, Place.cancel)
}
# what a forgotten queue leaves, unlisted, until retention deletes it (queue_forget.lua)
UNLISTED_WHEN_FORGOTTEN = (JobState.COMPLETE, JobState.CANCELLED)
# the indexes of jobs that have not ended: a queue holding one is listed in K.queues
LISTING = ("lane", "scheduled", "running", "depends", "failed")
SETS = {
    "scheduled": "scheduled",
    "running": "running",
    "depends": "depends",
    "complete": "complete_index",
    "failed": "failed_index",
    "cancelled": "cancelled_index",
}


def text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def scheduled_jid(member: str) -> str:
    """A scheduled member is its order ticket (hex, led by its length) and the jid."""
    digits = int(member[0], 16)
    return member[digits + 1 :]


def members(client: Client, key: str) -> list[str]:
    kind = text(client.redis.type(key))
    r = client.redis
    if kind == "zset":
        return [text(m) for m in r.zrange(key, 0, -1)]
    if kind == "set":
        return [text(m) for m in r.smembers(key)]
    if kind == "list":
        return [text(m) for m in r.lrange(key, 0, -1)]
    assert kind == "none", (key, kind)
    return []


def where(client: Client) -> dict[str, list[tuple[str, str]]]:
    """jid -> every (queue, index) it is found in."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for queue in QUEUES:
        lanes = client.redis.keys(client.keys.key("lane", queue=queue, prio="*", domain="*"))
        for lane in lanes:
            for jid in members(client, text(lane)):
                found[jid].append((queue, "lane"))
        for index, name in SETS.items():
            for member in members(client, client.keys.key(name, queue=queue)):
                jid = scheduled_jid(member) if index == "scheduled" else member
                found[jid].append((queue, index))
    return found


def check_indexes(client: Client, forgotten: frozenset[str] = frozenset()) -> None:
    """`forgotten`: queues forgotten at some step (their ended jobs may be unlisted)."""
    jids = [text(j) for j in client.redis.hkeys(client.keys.key("jobs"))]
    found = where(client)
    assert set(found) <= set(jids), f"indexed but not stored: {set(found) - set(jids)}"
    held: dict[str, set[str]] = defaultdict(set)
    for jid, job in zip(jids, client.get_jobs(jids), strict=True):
        assert job is not None, jid
        if job.queue in forgotten and job.state in UNLISTED_WHEN_FORGOTTEN and jid not in found:
            continue  # queue_forget.lua: kept unlisted until retention deletes it
        assert found.get(jid) == [(job.queue, INDEX_OF[job.state])], (
            jid,
            job.state,
            found.get(jid),
        )
        if job.state is JobState.RUNNING:
            assert job.worker, jid
            held[job.worker].add(jid)
        if job.state is JobState.FAILED:
            assert job.failure is not None, jid
            listed = members(client, client.keys.key("failed", group=job.failure.group))
            assert listed.count(jid) == 1, (jid, job.failure.group)
    # A master that said goodbye keeps its leases until they run out (forget_worker.lua).
    registered = {text(w) for w in client.redis.zrange(client.keys.key("workers"), 0, -1)}
    for worker in registered | set(held):
        holds = set(members(client, client.keys.key("worker_jobs", worker=worker)))
        assert holds == held.get(worker, set()), worker
    groups = client.redis.zrange(client.keys.key("failed_groups"), 0, -1, withscores=True)
    for group, count in cast(list[tuple[bytes, float]], groups):
        listed = members(client, client.keys.key("failed", group=text(group)))
        assert count == len(listed) > 0, (text(group), count, len(listed))
    queues = {text(q) for q in client.redis.zrange(client.keys.key("queues"), 0, -1)}
    for queue in QUEUES:
        holding = [i for places in found.values() for q, i in places if q == queue]
        assert queue in queues or not set(holding) & set(LISTING), (queue, holding)
        counts = client.queue(queue).counts()
        indexed = [i for places in found.values() for q, i in places if q == queue]
        assert counts["waiting"] + counts["throttled"] == indexed.count("lane"), (queue, counts)
        assert counts["running"] + counts["stalled"] == indexed.count("running"), (queue, counts)
        for index in ("scheduled", "depends", "complete", "failed", "cancelled"):
            assert counts[index] == indexed.count(index), (queue, index, counts)


class Graph(Run):
    """The due time's random operations, and puts that depend on earlier jobs."""

    forgotten: frozenset[str] = frozenset()

    def queue_forget(self, queue: str) -> None:
        super().queue_forget(queue)
        self.forgotten |= {queue}

    def put_depending(self, queue: str, i: int) -> None:
        if not self.jids:
            return
        on = self.jids[i % len(self.jids)]
        with contextlib.suppress(BadArgument):  # on a cancelled job
            self.jids.append(self.client.queue(queue).put("a.b:c", {}, depends=[on], retries=1))

    def cancel(self, i: int) -> None:
        with contextlib.suppress(DependedOn):  # cancel both together
            super().cancel(i)

    def depend(self, on: bool, i: int, j: int) -> None:
        if not self.jids:
            return
        jid, other = self.jids[i % len(self.jids)], self.jids[j % len(self.jids)]
        scheduling = self.client.scheduling
        with contextlib.suppress(BadArgument, WrongState, NoSuchJob):  # a cycle, it ran
            scheduling.depend(jid, other) if on else scheduling.undepend(jid, other)

    def unfail(self, group: str, queue: str | None) -> None:
        with contextlib.suppress(BadArgument):
            self.client.unfail(group, queue, 3)

    def priority(self, i: int, value: int) -> None:
        if self.jids:
            with contextlib.suppress(NoSuchJob):
                self.client.scheduling.set_priority(self.jids[i % len(self.jids)], value)


GRAPH_OPS = st.one_of(
    OPS,
    st.tuples(st.just("put_depending"), st.sampled_from(QUEUES), st.integers(0, 30)),
    st.tuples(st.just("cancel"), st.just(-1)),  # the newest job: often a dependent
    st.tuples(st.just("depend"), st.booleans(), st.integers(0, 30), st.integers(0, 30)),
    st.tuples(
        st.just("unfail"),
        st.sampled_from(["G", FailureGroup.DEPENDENCY_FAILED, FailureGroup.LEASE_EXPIRED]),
        st.sampled_from([None, *QUEUES]),
    ),
    st.tuples(st.just("priority"), st.integers(0, 30), st.sampled_from([-1, 0, 5])),
)


def replay_on(server: RedisServer) -> Any:
    def run(ops: list[tuple[Any, ...]]) -> None:
        replay(server, ops)

    return run


def replay(server: RedisServer, ops: list[tuple[Any, ...]]) -> None:
    with fresh_client(server) as (client, clock):
        client.set_domain_limit("d.example", rate=1, period=1.0)
        run = Graph(client, clock)
        for op in ops:
            run.apply(op)
            check_indexes(client, run.forgotten)


SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}


@settings(max_examples=40, **SETTINGS)  # type: ignore[arg-type]
@given(ops=st.lists(GRAPH_OPS, min_size=1, max_size=40))
def test_every_job_is_in_the_one_index_its_record_names_after_every_step(
    redis_server: RedisServer, ops: list[tuple[Any, ...]]
) -> None:
    replay(redis_server, ops)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@settings(max_examples=2000, **SETTINGS)  # type: ignore[arg-type]
@given(ops=st.lists(GRAPH_OPS, min_size=1, max_size=80))
def test_every_job_is_in_the_one_index_its_record_names_over_long_histories(
    redis_server: RedisServer, ops: list[tuple[Any, ...]]
) -> None:
    replay(redis_server, ops)


# Planted bugs of place.lua's kind: a move into depends that leaves out its index,
# and one that leaves out its queue's listing (as depends.lua's own move did
# before place.lua made them all).
TO_DEPENDS = """function Place.to_depends(jid, meta, due_ms, now_ms)
  list_queue(meta.q, now_ms)
  meta.s, meta.d = DEPENDS, due_ms
  redis.call('SADD', K.depends(meta.q), jid)
"""


@contextlib.contextmanager
def planted(old: str, new: str) -> Iterator[None]:
    """Every script built with lib/place.lua's `old` text replaced by `new`."""
    read = scripts._read

    def patched(relative: str) -> str:
        source = read(relative)
        if relative == "lib/place.lua":
            assert old in source, "the planted bug's lines moved"
            return source.replace(old, new)
        return source

    cached = (scripts.load, scripts._digest, scripts.library)
    for f in cached:
        f.cache_clear()
    scripts._read = patched
    try:
        yield
    finally:
        scripts._read = read
        for f in cached:
            f.cache_clear()


def test_the_index_property_finds_a_move_into_depends_that_leaves_out_its_index(
    redis_server: RedisServer,
) -> None:
    """The default run's property, as it is, against the planted bug."""
    prop = given(ops=st.lists(GRAPH_OPS, min_size=1, max_size=40))(
        lambda ops: replay(redis_server, ops)
    )
    found = settings(
        max_examples=40,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        **SETTINGS,  # type: ignore[arg-type]
    )(prop)
    unindexed = TO_DEPENDS.replace("  redis.call('SADD'", "  -- redis.call('SADD'")
    with planted(TO_DEPENDS, unindexed), pytest.raises(AssertionError, match="'depends'"):
        found()


def test_the_index_check_finds_a_move_into_depends_that_leaves_its_queue_unlisted(
    redis_server: RedisServer,
) -> None:
    ops = [("put", "a", None, False), ("put_depending", "b", 0)]
    replay(redis_server, ops)  # place.lua as it is
    unlisted = TO_DEPENDS.replace("  list_queue", "  -- list_queue")
    with (
        planted(TO_DEPENDS, unlisted),
        pytest.raises(AssertionError, match=r"\('b', \['depends'\]\)"),
    ):
        replay(redis_server, ops)
