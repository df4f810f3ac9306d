"""The sans-IO boundary (no Redis): each operation's ARGV and reply decoding,
the plan that runs Calls (reloads, FCALL -> EVALSHA) fed with replies as
redis-py parses them, and the classification of error replies."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from redis._parsers.base import BaseParser

from runtime.errors import (
    BadArgument,
    CorruptReply,
    Error,
    LeaseLost,
    RedisCommandError,
    RedisCondition,
    RedisTransient,
    RedisUnavailable,
)
from runtime.queue import ops, scripts, wire
from runtime.queue.faults import classify
from runtime.queue.keys import Keys
from runtime.queue.leases import CompleteRow, FailRow, Leased, Outcomes, Popped

URL = "redis://app:s3cret@127.0.0.1:6379/0"
CAP = 64 * 1024


def job_reply(jid: str, **changes: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "jid": jid,
        "data": {"n": 1},
        "lease_ms": 60_000,
        "timeout_s": 3600,
        "meta": {"l": "tok-" + jid, "k": "app.jobs:run", "q": "q", "a": 1, "r": 5, "m": 5},
    }
    reply.update(changes)
    return reply


def reply_error(text: str) -> redis.RedisError:
    """An error reply as redis-py's parser makes it from the wire (-<text>)."""
    err: redis.RedisError = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return err


# --- ARGV -----------------------------------------------------------------------------


def test_a_master_s_pop_sends_worker_count_seed_order_ahead_in_us_idle_and_queues() -> None:
    call = ops.pop("host-1", 4, ["a", "b"], "round-robin", ahead_s=0.005, idle=True)
    worker, count, seed, order, ahead_us, idle, *queues = call.args
    assert (call.name, call.script, call.repeatable) == ("pop", True, False)
    assert (worker, count, order, ahead_us, idle, queues) == (
        "host-1",
        4,
        "round-robin",
        5000,
        1,
        ["a", "b"],
    )
    assert isinstance(seed, str) and len(seed) == 16
    assert ops.pop("h", 1, ["q"]).args[1:] != call.args[1:]  # a fresh seed each call


def test_reports_go_as_one_batch_per_kind_with_flat_rows_and_messages_cut() -> None:
    out = Outcomes()
    out.add_complete("j1", "t1")
    out.add_retry("j2", "t2", "app.Boom", "x" * 200_000 + "TAIL", 1500)
    out.add_fail("j3", "t3", "app.Bad", "y" * 100)
    out.add_release("j4", "t4")
    out.add_release("j5", "t5", started=True)
    calls = ops.reports("host-1", out)
    assert [kind for kind, _ in calls] == ["complete", "retry", "fail", "release"]
    complete, retry, fail, release = (call.args for _, call in calls)
    assert complete == ("host-1", "j1", "t1", "{}", "", "", "")
    assert retry[:4] == ("host-1", "j2", "t2", "app.Boom") and retry[5:] == (1500, "", "")
    assert isinstance(retry[4], str) and retry[4].endswith("TAIL")
    assert len(retry[4].encode()) <= CAP
    assert fail == ("host-1", "j3", "t3", "app.Bad", "y" * 100, "", "")
    assert release == ("host-1", "j4", "t4", 0, "j5", "t5", 1), "a job that ran keeps its attempt"
    assert all(call.repeatable for _, call in calls)


def test_a_100_mb_traceback_is_cut_when_the_master_records_it() -> None:
    out = Outcomes()
    huge = "Traceback (most recent call last):\n" + "z" * (100 * 1024 * 1024) + "\nValueError"
    out.add_fail("j1", "t1", "builtins.ValueError", huge)
    out.add_retry("j2", "t2", "builtins.ValueError", huge, -1)
    for message in (out.fail[0][3], out.retry[0][3]):
        assert len(message.encode()) <= CAP and message.endswith("\nValueError")
        assert message.startswith("[... cut ")


def test_the_sync_client_s_reports_cut_messages_the_same_way() -> None:
    [_, _, _, _, message, _, _] = ops.fail("w", [FailRow("j", "t", "g", "é" * 50_000, "")]).args
    assert message == wire.cap_message("é" * 50_000)


def test_heartbeat_release_forget_and_resumed_arguments() -> None:
    assert ops.heartbeat("w", {"j1": "t1", "j2": "t2"}).args == ("w", "j1", "t1", "j2", "t2")
    assert ops.release("w", {"j1": "t1"}).args == ("w", "j1", "t1", 0)
    assert ops.release("w", {"j1": "t1"}, {"j1"}).args == ("w", "j1", "t1", 1)
    assert ops.forget_worker("w", ["a", "b"]).args == ("w", "a", "b")
    assert ops.resumed("w", 12_500).args == ("w", 12_500)
    assert ops.heartbeat("w", {}).repeatable and ops.resumed("w", 1).repeatable


def test_which_calls_may_be_sent_twice() -> None:
    spec = wire.JobSpec.build("q", "a.b:c")
    repeatable: list[ops.Call[Any]] = [
        ops.put([spec]),
        ops.get(["j"]),
        ops.counts(["q"]),
        ops.peek("q", 1),
        ops.failed_groups(),
        ops.recur_ticks("r", "* * * * *", [1]),
    ]
    once: list[ops.Call[Any]] = [
        ops.cancel(["j"]),
        ops.unfail("g", "q", 1),
        ops.requeue("j", ""),
        ops.pop("w", 1, ["q"]),
        ops.wait_for_work(["k"], 1.0),
        ops.depends("j", "on", ["k"]),
    ]
    assert all(c.repeatable for c in repeatable)
    assert not any(c.repeatable for c in once)


def test_plain_commands_carry_their_keys() -> None:
    keys = Keys("ns")
    assert ops.setting(keys, "heartbeat").args == ("{ns}:config", "heartbeat")
    assert ops.wait_for_work(["{ns}:a", "{ns}:b"], 2.5).args == ("{ns}:a", "{ns}:b", 2.5)
    assert ops.wait_for_work(["{ns}:a"], 2.5).blocks_s == 2.5
    assert [c.name for c in ops.give_back("{ns}:k")] == ["RPUSH", "LTRIM"]


# --- replies ----------------------------------------------------------------------------


def test_one_job_that_does_not_decode_leaves_the_others_of_its_pop() -> None:
    reply = {
        "jobs": [
            job_reply("good1"),
            job_reply("bad-data", data="{not an object"),
            {"jid": "no-meta", "data": {}},
            "not even an object",
            job_reply("good2", start_in_us=2500, expires_us=7, handed=True),
        ],
        "wake_in_ms": -1,
        "now_us": 1_000_000,
    }
    popped = ops.pop("w", 5, ["q"]).read(json.dumps(reply).encode())
    assert [j.jid for j in popped.jobs] == ["good1", "good2"]
    assert [jid for jid, _ in popped.corrupt] == ["bad-data", "no-meta", None]
    assert all(why for _, why in popped.corrupt)
    assert popped.wake_in_s is None and popped.now_us == 1_000_000
    assert popped.jobs[1].start_in_s == 0.0025 and popped.jobs[1].handed


def test_a_pop_reply_that_is_not_json_is_a_corrupt_reply() -> None:
    with pytest.raises(CorruptReply, match="pop"):
        ops.pop("w", 1, ["q"]).read(b'{"jobs": [')
    with pytest.raises(CorruptReply):
        ops.pop("w", 1, ["q"]).read(b'["a list"]')


def test_a_handed_job_decodes_or_names_its_jid() -> None:
    leased = ops.handed(json.dumps(job_reply("h1", expires_us=5)).encode())
    assert isinstance(leased, Leased) and leased.expires_us == 5
    with pytest.raises(CorruptReply) as bad:
        ops.handed(json.dumps(job_reply("h2", data=[1])).encode())
    assert bad.value.jid == "h2"
    with pytest.raises(CorruptReply) as garbage:
        ops.handed(b"\xff{")
    assert garbage.value.jid is None


def test_batch_replies_give_a_state_or_an_error_per_job() -> None:
    reply = [
        {"jid": "a", "ok": True, "state": "complete"},
        {"jid": "b", "error": "LEASE_LOST", "message": "lease lost on b"},
    ]
    rows = [CompleteRow("a", "t", "{}", "", ""), CompleteRow("b", "t", "{}", "", "")]
    states = ops.complete("w", rows).read(json.dumps(reply))
    assert states["a"] == "complete" and isinstance(states["b"], LeaseLost)


def test_maps_arrive_as_resp3_maps_or_resp2_lists() -> None:
    call = ops.hash_of("k")
    assert call.read({b"a": b"1", b"b": b"2"}) == {"a": "1", "b": "2"}
    assert call.read([b"a", b"1", b"b", b"2"]) == {"a": "1", "b": "2"}
    with pytest.raises(CorruptReply):
        call.read([b"a"])


def test_popped_keeps_its_fields_and_defaults() -> None:
    popped = Popped([], 0.25)
    assert (popped.refill, popped.now_us, popped.corrupt) == ([], None, [])


# --- the plan that runs calls -------------------------------------------------------------


def drive(plan: scripts.Plan[Any], answers: list[list[Any]]) -> tuple[Any, list[list[Any]]]:
    """Runs a plan against scripted replies; returns its result and what it sent."""
    sent = [next(plan)]
    try:
        for replies in answers:
            assert len(replies) == len(sent[-1]), sent[-1]
            sent.append(plan.send(replies))
    except StopIteration as done:
        return done.value, sent
    raise AssertionError(f"the plan wanted more round trips: {sent[-1]}")


def test_calls_go_out_as_fcall_with_the_root_as_their_only_key() -> None:
    session = scripts.Session(URL, "{ns}")
    calls: list[ops.Call[Any]] = [ops.counts(["q"]), ops.ping(), ops.cancel(["j"])]
    results, sent = drive(scripts.run(session, calls), [[b'{"q": {}}', b"PONG", b'["j"]']])
    assert results == [{"q": {}}, None, ["j"]]
    # a read (no-writes) goes as FCALL_RO: it runs on replicas
    assert sent[0][0][:4] == ("FCALL_RO", scripts.function_name("counts"), 1, "{ns}")
    assert sent[0][1] == ("PING",)
    assert sent[0][2][:4] == ("FCALL", scripts.function_name("cancel"), 1, "{ns}")


def test_a_server_that_lost_the_library_gets_it_and_only_the_lost_calls_go_again() -> None:
    session = scripts.Session(URL, "{ns}")
    calls: list[ops.Call[Any]] = [ops.ping(), ops.counts(["q"])]
    lost = reply_error("ERR Function not found")
    results, sent = drive(scripts.run(session, calls), [[b"PONG", lost], [b"OK"], [b"{}"]])
    assert results == [None, {}]
    assert sent[1] == [("FUNCTION", "LOAD", "REPLACE", scripts.library())]
    assert [c[0] for c in sent[2]] == ["FCALL_RO"]


def test_a_server_without_fcall_runs_the_operations_by_evalsha_from_then_on() -> None:
    session = scripts.Session(URL, "{ns}")
    unknown = reply_error("ERR unknown command 'FCALL', with args beginning with: ")
    loads = [b"sha"] * len(scripts.operations())
    results, sent = drive(scripts.run(session, [ops.now()]), [[unknown], loads, [b"5"]])
    assert results == [5] and not session.functions
    assert {c[:2] for c in sent[1]} == {("SCRIPT", "LOAD")}
    assert sent[2][0][:2] == ("EVALSHA", scripts.load("now").sha)
    _, again = drive(scripts.run(session, [ops.now()]), [[b"6"]])
    assert again[0][0][0] == "EVALSHA"


def test_scripts_that_cannot_be_loaded_now_are_a_transient_scripts_condition() -> None:
    session = scripts.Session(URL, "{ns}")
    lost = reply_error("ERR Function not found")
    oom = reply_error("OOM command not allowed when used memory > 'maxmemory'.")
    with pytest.raises(RedisTransient) as refused:
        drive(scripts.run(session, [ops.now()]), [[lost], [oom]])
    assert refused.value.condition is RedisCondition.SCRIPTS and "oom" in str(refused.value)


def test_a_server_that_keeps_losing_them_is_a_transient_scripts_condition() -> None:
    session = scripts.Session(URL, "{ns}")
    lost = reply_error("ERR Function not found")
    answers: list[list[Any]] = [[lost], [b"OK"]] * scripts.RELOADS
    answers.append([lost])
    with pytest.raises(RedisTransient) as refused:
        drive(scripts.run(session, [ops.now()]), answers)
    assert refused.value.condition is RedisCondition.SCRIPTS


def test_each_call_gets_its_own_error_and_the_others_their_replies() -> None:
    session = scripts.Session(URL, "{ns}")
    calls: list[ops.Call[Any]] = [ops.cancel(["j"]), ops.now(), ops.get(["j"])]
    replies = [reply_error("BAD_ARG cancel_max exceeded"), b"7", b"{broken"]
    results, _ = drive(scripts.run(session, calls), [replies])
    assert isinstance(results[0], BadArgument) and str(results[0]) == "cancel_max exceeded"
    assert results[1] == 7
    assert isinstance(results[2], CorruptReply)


# --- classification -------------------------------------------------------------------------

CONDITIONS = [
    (
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        RedisCondition.BUSY,
    ),
    ("LOADING Redis is loading the dataset in memory", RedisCondition.LOADING),
    ("READONLY You can't write against a read only replica.", RedisCondition.READONLY),
    (
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        RedisCondition.MASTERDOWN,
    ),
    ("TRYAGAIN Multiple keys request during rehashing of slot", RedisCondition.TRYAGAIN),
    ("CLUSTERDOWN The cluster is down", RedisCondition.CLUSTERDOWN),
    ("OOM command not allowed when used memory > 'maxmemory'.", RedisCondition.OOM),
    ("NOSCRIPT No matching script. Please use EVAL.", RedisCondition.SCRIPTS),
]


@pytest.mark.parametrize(("reply", "condition"), CONDITIONS)
def test_server_states_that_pass_are_transient_with_their_condition(
    reply: str, condition: RedisCondition
) -> None:
    found = classify(reply_error(reply), URL, "pop")
    assert isinstance(found, RedisTransient) and found.condition is condition
    assert f"({condition})" in str(found) and "s3cret" not in str(found)


@pytest.mark.parametrize(
    ("raised", "condition"),
    [
        (redis.exceptions.ConnectionError("Connection closed by server."), "connection"),
        (ConnectionResetError(104, "Connection reset by peer"), "connection"),
        (ConnectionRefusedError(111, "Connection refused"), "connection"),
        (BrokenPipeError(32, "Broken pipe"), "connection"),
        (redis.exceptions.TimeoutError("Timeout reading from socket"), "timeout"),
        (TimeoutError(), "timeout"),
        (redis.exceptions.ConnectionError("max number of clients reached"), "connection"),
    ],
)
def test_a_lost_or_silent_connection_is_transient(raised: Exception, condition: str) -> None:
    found = classify(raised, URL)
    assert isinstance(found, RedisTransient) and found.condition == condition


def test_credentials_and_missing_rights_are_unavailable_but_not_transient() -> None:
    for reply in (
        "WRONGPASS invalid username-password pair or user is disabled.",
        "NOAUTH Authentication required.",
        "NOPERM this user has no permissions to run the 'blpop' command",
    ):
        found = classify(reply_error(reply), URL)
        assert type(found) is RedisUnavailable, reply
    denied = classify(
        reply_error("NOPERM this user has no permissions to run the 'blpop' command"), URL
    )
    assert "denies user 'app'" in str(denied) and "'blpop'" in str(denied)
    assert "requires a password" in str(
        classify(reply_error("NOAUTH Authentication required."), "redis://h/0")
    )


def test_script_codes_and_other_refusals() -> None:
    assert isinstance(classify(reply_error("LEASE_LOST lease lost on j1"), URL), LeaseLost)
    other = classify(reply_error("WRONGTYPE Operation against a key holding the wrong kind"), URL)
    assert type(other) is RedisCommandError
    garbage = classify(redis.exceptions.InvalidResponse("Protocol Error: H"), URL)
    assert type(garbage) is RedisUnavailable and "does not speak Redis" in str(garbage)
    assert isinstance(classify(redis.exceptions.DataError("bad arg"), URL), Error)
