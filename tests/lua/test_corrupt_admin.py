"""Corrupt records met by the scripts people run by hand (priority, tags,
requeue, unfail ...) and corrupt definitions beside the jobs (recurrences,
domain limits, lease holders' handoff lists): a typed answer, never a Lua
error, and the job failed as runtime.CorruptJob for good."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runtime import BadArgument, Client, LeaseLost, WrongState
from runtime.errors import Error
from tests.conftest import record
from tests.lua.test_corrupt import (  # json_records: autouse, JSON metas to corrupt
    GROUP,
    RECORD_KINDS,
    corrupt,
    json_records,  # noqa: F401
    queued,
)
from tests.support.clock import FrozenClock

# Each script that loads a record by jid, and what it answers for a corrupt
# one: its usual reply (about the failed record) or a typed error.
SCRIPTS: dict[str, tuple[Callable[[Client], Any], type[Error] | Any]] = {
    "priority": (lambda c: c.conn.run("priority", "bad", 3), b"failed"),
    "tag": (lambda c: c.conn.run_json("tag", "bad", "add", "t1"), ["t1"]),
    "track": (lambda c: c.conn.run("track", "bad", "on"), 1),
    "depends": (lambda c: c.conn.run("depends", "bad", "on", "good"), WrongState),
    "requeue": (lambda c: c.conn.run("requeue", "bad", ""), WrongState),
    "release": (lambda c: c.leases.release("bad", "w", "token"), LeaseLost),
    "fail": (lambda c: c.leases.fail("bad", "w", "token", "g", "m"), LeaseLost),
    "retry": (lambda c: c.leases.retry("bad", "w", "token", "g", "m", delay=0), LeaseLost),
    "put-depending-on-it": (
        lambda c: c.queue("q").put("a.b:c", {}, jid="new", depends=["bad"]),
        "new",
    ),
}


@pytest.mark.parametrize("name", RECORD_KINDS)
@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_that_load_a_corrupt_record_answer_with_a_typed_result(
    client: Client, clock: FrozenClock, script: str, name: str
) -> None:
    queued(client, "bad")
    queued(client, "good")
    corrupt(client, "bad", RECORD_KINDS[name])
    call, expected = SCRIPTS[script]
    if isinstance(expected, type):
        with pytest.raises(expected):
            call(client)
    else:
        assert call(client) == expected
    meta, data = record(client, "bad")  # type: ignore[misc]
    assert (meta["s"], meta["cr"], meta["f"]["g"], data) == ("failed", 1, GROUP, "{}")
    # a job put waiting on a job failed for good fails at once with it
    doomed = {"runtime.DependencyFailed": 1} if script == "put-depending-on-it" else {}
    assert client.failed() == {GROUP: 1, **doomed}
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]


def test_a_corrupt_record_can_neither_be_unfailed_nor_requeued(
    client: Client, clock: FrozenClock
) -> None:
    queued(client, "bad")
    client.get_job("bad")
    corrupt(client, "bad", RECORD_KINDS["pickle"])
    assert client.get_job("bad").failure.group == GROUP  # type: ignore[union-attr]
    with pytest.raises(BadArgument, match="cannot run again"):
        client.unfail(GROUP, "q")
    with pytest.raises(WrongState, match="cannot run again"):
        client.scheduling.requeue("bad")
    assert client.cancel("bad") == ["bad"]
    assert client.failed() == {}


def test_a_failed_job_found_corrupt_is_listed_as_corrupt_and_moved_by_the_next_write(
    client: Client, clock: FrozenClock
) -> None:
    for jid in ("bad", "other"):
        queued(client, jid)
        [job] = client.queue("q").pop(1, worker="w")
        job.fail("app.Error", "boom")
    corrupt(client, "bad", RECORD_KINDS["meta-not-json"])
    total, jobs = client.admin.failed_jobs("app.Error")
    assert (total, [(j.jid, j.failure.group) for j in jobs]) == (  # type: ignore[union-attr]
        2,
        [("other", "app.Error"), ("bad", GROUP)],
    )
    assert client.failed() == {"app.Error": 2}, "the listing (no-writes) moves nothing"
    assert client.unfail("app.Error", "q") == 1, "unfail moves it to its group (as below)"
    assert client.failed() == {GROUP: 1}


def test_unfail_fails_a_corrupt_job_as_corrupt_and_moves_the_others(
    client: Client, clock: FrozenClock
) -> None:
    for jid in ("bad", "other"):
        queued(client, jid)
        [job] = client.queue("q").pop(1, worker="w")
        job.fail("app.Error", "boom")
    corrupt(client, "bad", RECORD_KINDS["no-newline"])
    assert client.unfail("app.Error", "q") == 1
    assert client.failed() == {GROUP: 1}
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["other"]


def test_a_job_whose_data_turned_deep_is_listed_failed_as_corrupt(
    client: Client, clock: FrozenClock
) -> None:
    queued(client, "bad")
    [job] = client.queue("q").pop(1, worker="w")
    job.fail("app.Error", "boom")
    meta_text = json.dumps(record(client, "bad")[0], separators=(",", ":"))  # type: ignore[index]
    deep = '{"a":' * 100 + "{}" + "}" * 100
    client.redis.hset(client.keys.key("jobs"), "bad", meta_text + "\n" + deep)
    total, jobs = client.admin.failed_jobs("app.Error")
    assert (total, [j.failure.group for j in jobs]) == (1, [GROUP])  # type: ignore[union-attr]


def test_a_recurrence_that_does_not_decode_leaves_the_schedule_and_pops_go_on(
    client: Client, clock: FrozenClock
) -> None:
    client.redis.hset(client.keys.key("recur"), "r1", b"\x80\x04not json")
    client.redis.zadd(client.keys.key("recurring", queue="q"), {"r1": clock.now_us - 1})
    queued(client, "good")
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]
    assert client.redis.zcard(client.keys.key("recurring", queue="q")) == 0
    assert client.conn.run("unrecur", "r1") == 1
    assert client.redis.hlen(client.keys.key("recur")) == 0


def test_a_recurrence_whose_jobs_no_longer_pass_put_stops_with_its_reason(
    client: Client, clock: FrozenClock
) -> None:
    definition = {"id": "r1", "queue": "q", "spec": {"klass": "a.b:c"}, "every": 10}
    client.conn.run("recur", json.dumps(definition), json.dumps({"text": "x" * 100}))
    client.admin.config_set("max-data-bytes", 50)
    clock.advance(11)
    assert client.queue("q").pop(5, worker="w") == []
    stored = json.loads(client.redis.hget(client.keys.key("recur"), "r1") or "")
    assert "max-data-bytes" in stored["error"] and "next" not in stored
    assert client.redis.zcard(client.keys.key("recurring", queue="q")) == 0


def test_a_domain_limit_that_does_not_decode_counts_as_none(
    client: Client, clock: FrozenClock
) -> None:
    client.redis.hset(client.keys.key("domain_limits"), "d.example", b"{rate: fast}")
    client.queue("q").put("a.b:c", {}, jid="j1", domain="d.example")
    client.queue("q").put("a.b:c", {}, jid="j2", domain="d.example")
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["j1", "j2"]


def test_messages_and_tokens_that_are_not_utf8_never_make_a_record_corrupt(
    client: Client, clock: FrozenClock
) -> None:
    queued(client, "j1")
    [job] = client.queue("q").pop(1, worker="w")
    [refused] = client.conn.run_json("fail", "w", "j1", job.token, b"bad\xffgroup", "m", "", "")
    assert refused["error"] == "BAD_ARG" and "bad\\xffgroup" in refused["message"]
    reply = client.conn.run_json("fail", "w", "j1", job.token, "g", b"caf\xe9 \xff", "", "")
    assert reply[0]["state"] == "failed"
    got = client.get_job("j1")
    assert got is not None and got.failure is not None
    assert got.failure.message == "caf\\xe9 \\xff"
    assert client.failed() == {"g": 1}
