"""Compact records (lib/job.lua): a queued job's meta stored as a state letter
and space-separated fields when the shared setting compact-records is 1. This
release reads both forms always; with the setting 0 it writes JSON only, the
form a release before it reads. Both forms in one namespace go
through every step alike."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from runtime import Client
from runtime.config import LIMITS
from runtime.queue.job import Job
from tests.conftest import raw_record
from tests.support.clock import FrozenClock

# 6.2's scripts read every record in full, 7's functions
# remember theirs: both paths in the default run
pytestmark = pytest.mark.every_version

W = "host-1"


@pytest.fixture(autouse=True)
def json_first(client: Client) -> None:
    """Each test starts with the setting 0 (JSON) and turns it on where it says:
    unset, it depends on the masters registered (test_compact_auto.py)."""
    client.admin.config_set("compact-records", "0")


def compact_on(client: Client) -> None:
    client.admin.config_set("compact-records", "1")


def meta_line(client: Client, jid: str) -> bytes:
    return (raw_record(client, jid) or b"").partition(b"\n")[0]


def is_compact(client: Client, jid: str) -> bool:
    return not meta_line(client, jid).startswith(b"{")


def same_but_jid(a: Job | None, b: Job | None) -> None:
    assert a is not None and b is not None
    assert dataclasses.replace(a, jid="x") == dataclasses.replace(b, jid="x")


def test_with_the_setting_off_a_put_stores_json_as_the_previous_release_does(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {"n": 1}, jid="j1")
    meta = json.loads(meta_line(client, "j1"))
    assert meta == {
        "k": "a.b:c",
        "q": "q",
        "s": "waiting",
        "r": 5,
        "m": 5,
        "o": 1,
        "h": [{"e": "put", "t": clock.now_ms}],
    }


def test_with_the_setting_on_a_fresh_job_is_stored_compact_and_reads_the_same(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="json")
    compact_on(client)
    q.put("a.b:c", {"n": 1}, jid="small")
    line = meta_line(client, "small")
    assert line == b"w1 2 " + format(clock.now_ms, "x").encode()
    assert client.redis.hgetall(client.keys.key("names")) == {
        b"=q a.b:c": b"1",
        b"#1": b"q a.b:c",
        b"count": b"1",
    }
    assert raw_record(client, "small") == line + b'\n{"n":1}'
    assert not is_compact(client, "json")
    json_job, small_job = client.get_job("json"), client.get_job("small")
    same_but_jid(json_job, small_job)
    assert small_job is not None and small_job.put_at_ms == clock.now_ms


@pytest.mark.parametrize(
    "options",
    [
        {"priority": -3},
        {"retries": 0},
        {"retries": 12},
        {"domain": "example.com"},
        {"delay": 30},
        {"priority": 7, "retries": 2, "domain": "d.e", "delay": 5},
    ],
    ids=["priority", "no-retries", "retries", "domain", "scheduled", "all"],
)
def test_every_compact_field_reads_back_as_its_json_twin(
    client: Client, clock: FrozenClock, options: dict[str, Any]
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="json", **options)
    compact_on(client)
    q.put("a.b:c", {"n": 1}, jid="small", **options)
    assert is_compact(client, "small")
    same_but_jid(client.get_job("json"), client.get_job("small"))


def test_a_scheduled_compact_job_is_promoted_popped_and_completed(
    client: Client, clock: FrozenClock
) -> None:
    compact_on(client)
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="later", delay=10, priority=2)
    put_ms = clock.now_ms
    assert meta_line(client, "later").startswith(b"s1 1 ")
    clock.advance(11)
    q.put("a.b:c", {}, jid="now", priority=2)  # a move into waiting promotes first
    due = format(put_ms + 10_000, "x").encode()
    assert meta_line(client, "later").startswith(b"w1 ")
    assert meta_line(client, "later").endswith(b" p2 e" + due), "due time gone, qt kept"
    [lease, _] = q.pop(2, worker=W)
    assert (lease.jid, lease.job.priority, lease.job.put_at_ms) == ("later", 2, put_ms)
    assert not is_compact(client, "later"), "a running job is stored as JSON"
    assert lease.complete() == "complete"
    got = client.get_job("later")
    assert got is not None and got.state == "complete"
    assert [e.event for e in got.history] == ["put", "popped", "completed"]


def test_both_forms_in_one_namespace_pop_in_order_and_go_through_every_report(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i in range(4):
        q.put("a.b:c", {"i": i}, jid=f"json{i}", retries=1)
    compact_on(client)
    for i in range(4):
        clock.advance(0.001)
        q.put("a.b:c", {"i": i}, jid=f"small{i}", retries=1)
    assert [is_compact(client, f"small{i}") for i in range(4)] == [True] * 4
    leases = q.pop(8, worker=W)
    assert [lease.jid for lease in leases] == [f"json{i}" for i in range(4)] + [
        f"small{i}" for i in range(4)
    ]
    by_jid = {lease.jid: lease for lease in leases}
    for form in ("json", "small"):
        assert by_jid[f"{form}0"].complete() == "complete"
        assert by_jid[f"{form}1"].retry("x.Y", "again", delay=0) == "waiting"
        assert by_jid[f"{form}2"].fail("x.Y", "boom") == "failed"
        assert by_jid[f"{form}3"].release() == "waiting"
    states = {jid: client.get_job(jid) for jid in by_jid}
    for i in range(4):
        a, b = states[f"json{i}"], states[f"small{i}"]
        assert a is not None and b is not None
        assert (a.state, a.remaining, a.attempt, [e.event for e in a.history]) == (
            b.state,
            b.remaining,
            b.attempt,
            [e.event for e in b.history],
        )
    again = {lease.jid: lease for lease in q.pop(8, worker=W)}
    assert sorted(again) == ["json1", "json3", "small1", "small3"]
    for form in ("json", "small"):
        assert again[f"{form}1"].complete() == "complete"
        assert again[f"{form}3"].fail("x.Y", "for good") == "failed"
    assert client.failed() == {"x.Y": 4}
    assert client.unfail("x.Y", "q", 10) == 4
    assert sorted(lease.jid for lease in q.pop(8, worker=W)) == [
        "json2",
        "json3",
        "small2",
        "small3",
    ]


def test_a_compact_record_that_does_not_decode_fails_as_corrupt(
    client: Client, clock: FrozenClock
) -> None:
    compact_on(client)
    q = client.queue("q")
    for jid in ("bad-hex", "bad-option", "twice"):
        q.put("a.b:c", {}, jid=jid)
    key = client.keys.key("jobs")
    q.put("a.b:c", {}, jid="unknown")
    client.redis.hset(key, "bad-hex", b"Wa.b:c q 1 zz\n{}")
    client.redis.hset(key, "bad-option", b"w1 2 10 x1\n{}")
    client.redis.hset(key, "twice", b"w1 3 10 r1 r2\n{}")
    client.redis.hset(key, "unknown", b"w9 4 10\n{}")
    assert q.pop(4, worker=W) == []
    for jid in ("bad-hex", "bad-option", "twice", "unknown"):
        got = client.get_job(jid)
        assert got is not None and got.failure is not None
        assert (got.state, got.failure.group) == ("failed", "runtime.CorruptJob")


def test_a_meta_with_more_than_the_compact_form_holds_is_stored_as_json(
    client: Client, clock: FrozenClock
) -> None:
    compact_on(client)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="tagged", tags=["t"])
    q.put("a.b:c", {}, jid="unique", unique_key="u")
    q.put("a.b:c", {}, jid="backoff", backoff=(1, 2))
    q.put("a.b:c", {}, jid="plain")
    assert [is_compact(client, j) for j in ("tagged", "unique", "backoff", "plain")] == [
        False,
        False,
        False,
        True,
    ]
    client.scheduling.set_priority("plain", 3)  # a second event: the history is JSON's
    assert not is_compact(client, "plain")
    got = client.get_job("plain")
    assert got is not None and got.priority == 3


def test_turning_the_setting_off_again_writes_json_and_still_reads_compact(
    client: Client, clock: FrozenClock
) -> None:
    compact_on(client)
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="small")
    client.admin.config_set("compact-records", "0")
    q.put("a.b:c", {"n": 1}, jid="json")
    assert is_compact(client, "small") and not is_compact(client, "json")
    assert [lease.jid for lease in q.pop(2, worker=W)] == ["small", "json"]


def test_each_queue_and_klass_pair_gets_one_number_and_a_full_table_writes_names(
    client: Client, clock: FrozenClock
) -> None:
    compact_on(client)
    client.queue("q").put("a.b:c", {}, jid="j1")
    client.queue("q").put("a.b:c", {}, jid="j2")
    client.queue("q").put("a.b:d", {}, jid="j3")
    client.queue("r").put("a.b:c", {}, jid="j4")
    assert [meta_line(client, j).split(b" ")[0] for j in ("j1", "j2", "j3", "j4")] == [
        b"w1",
        b"w1",
        b"w2",
        b"w3",
    ]
    names = client.keys.key("names")
    client.redis.hset(names, "count", LIMITS["names_max"])
    client.queue("s").put("a.b:c", {}, jid="full", priority=1)
    client.queue("q").put("a.b:d", {}, jid="known")
    assert meta_line(client, "full").startswith(b"Wa.b:c s 1 ")
    assert meta_line(client, "known").startswith(b"w2 ")
    assert client.redis.hlen(names) == 7, "no pair added past names_max"
    [lease] = client.queue("s").pop(1, worker=W)
    assert (lease.jid, lease.job.klass, lease.job.priority) == ("full", "a.b:c", 1)
    got = client.get_job("j4")
    assert got is not None and (got.queue, got.klass) == ("r", "a.b:c")


def test_the_oldest_waiting_age_reads_a_compact_head(client: Client, clock: FrozenClock) -> None:
    compact_on(client)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="old")
    clock.advance(2)
    q.put("a.b:c", {}, jid="late", delay=1)
    clock.advance(3)
    q.put("a.b:c", {}, jid="new")  # promotes "late": eligible 3 s after it was put
    assert [is_compact(client, j) for j in ("old", "late", "new")] == [True, True, True]
    assert q.counts()["oldest_waiting_ms"] == 5000
    q.pop(1, worker=W)
    assert q.counts()["oldest_waiting_ms"] == 2000


def test_a_meta_naming_a_klass_with_a_blank_stays_json(client: Client, clock: FrozenClock) -> None:
    """No checked put makes one, but a record written by other means may hold it:
    its promotion (which keeps the history as it is) leaves it JSON."""
    q = client.queue("q")
    q.put("a.b:c", {}, jid="odd", delay=1)
    line = meta_line(client, "odd").replace(b'"k":"a.b:c"', b'"k":"a.b:c d"')
    client.redis.hset(client.keys.key("jobs"), "odd", line + b"\n{}")
    compact_on(client)
    clock.advance(2)
    q.put("a.b:c", {}, jid="next")  # promotes "odd" first
    assert json.loads(meta_line(client, "odd"))["s"] == "waiting"
    assert is_compact(client, "next")
    got = client.get_job("odd")
    assert got is not None and got.klass == "a.b:c d"


def test_a_names_table_replaced_between_calls_is_read_afresh(
    client: Client, clock: FrozenClock
) -> None:
    """The server keeps what its calls looked up in K.names (lib/compact.lua), but a
    number found by one call never serves the next: after K.names is replaced (a
    restore, a failover back and forth) where number 1 names another pair, the
    same pair is looked up again and its records name it rightly, both ways."""
    compact_on(client)
    client.queue("q").put("a.b:c", {}, jid="before")
    assert meta_line(client, "before").startswith(b"w1 ")
    names = client.keys.key("names")
    client.redis.delete(names)
    client.redis.hset(names, mapping={"=other x.y:z": "1", "#1": "other x.y:z", "count": "1"})
    client.queue("q").put("a.b:c", {}, jid="after")
    assert meta_line(client, "after").startswith(b"w2 "), "looked up again: a new number"
    got = client.get_job("after")
    assert got is not None and (got.queue, got.klass) == ("q", "a.b:c")
    moved = client.get_job("before")  # its number names the other pair now, as stored
    assert moved is not None and (moved.queue, moved.klass) == ("other", "x.y:z")
