"""What an attempt leaves on its job (issue 12): the result, the output tail,
history notes and the jobs it put, as whole records under a frozen clock."""

from __future__ import annotations

import json

import pytest

from runtime import Client, Lease
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from tests.conftest import raw_record, record, snapshot
from tests.support.clock import FrozenClock

W = "host-1"


def popped(client: Client, queue: str = "q") -> Lease:
    [job] = client.queue(queue).pop(1, worker=W)
    return job


def send(client: Client, outcomes: Outcomes) -> dict[str, object]:
    """The master's reports, sent as its exchange sends them (ops.reports)."""
    states: dict[str, object] = {}
    for _, call in ops.reports(W, outcomes):
        answered = client.conn.call(call)
        states.update(answered)
    return states


def test_a_completion_stores_result_output_and_puts_in_one_step(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("app.jobs:crawl", {"url": "a"}, jid="j1")
    put_ms = clock.now_ms
    job = popped(client)
    clock.advance(2)
    kids = [client.queue("links").spec("app.jobs:crawl", {"url": u}, jid=u) for u in ("b", "c")]
    out = Outcomes()
    out.add_complete(
        "j1",
        job.token or "",
        result='{"links":2}',
        output="fetched a\n",
        note="two links",
        puts=[k.to_wire() for k in kids],
    )
    assert send(client, out) == {"j1": "complete"}
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert meta == {
        "k": "app.jobs:crawl",
        "q": "q",
        "s": "complete",
        "r": 5,
        "m": 5,
        "a": 1,
        "pt": put_ms,
        "w": W,
        "l": job.token,
        "lr": "complete",
        "ot": 1,
        "rl": 11,
        "h": [
            {"e": "put", "t": put_ms},
            {"e": "popped", "t": put_ms, "w": W},
            {"e": "puts", "t": clock.now_ms, "c": 2, "j": ["b", "c"]},
            {"e": "completed", "t": clock.now_ms, "w": W, "n": "two links"},
        ],
    }
    assert data == '{"url":"a"}{"links":2}', "the result follows the data, rl bytes long"
    found = client.get_job("j1")
    assert found is not None
    assert (found.data, found.result, found.output) == ({"url": "a"}, {"links": 2}, "fetched a\n")
    assert [(e.event, e.count, e.jids, e.note) for e in found.history[2:]] == [
        ("puts", 2, ("b", "c"), None),
        ("completed", None, (), "two links"),
    ]
    kid_meta, kid_data = record(client, "b")  # type: ignore[misc]
    assert kid_meta["h"] == [{"e": "put", "t": clock.now_ms, "b": "j1"}]
    assert (kid_meta["s"], kid_data) == ("waiting", '{"url":"b"}')
    assert client.get_job("b").history[0].by == "j1"  # type: ignore[union-attr]
    assert client.queue("links").counts()["waiting"] == 2


@pytest.mark.parametrize(
    ("result", "note"),
    [
        ("x" * 2000, "result not stored: 2000 bytes, over result-max-bytes (1000)"),
        ("{not json", "result not stored: not JSON (it does not decode)"),
        ('{"a":1} trailing', "result not stored: not JSON (it does not decode)"),
        ("[" * 101 + "]" * 101, "result not stored: not JSON (nested deeper than 100 levels)"),
        (b"\xff\xfe", "result not stored: not JSON (not valid UTF-8)"),
    ],
    ids=["too-big", "not-json", "trailing", "too-deep", "not-utf8"],
)
def test_a_result_too_big_or_not_json_completes_the_job_without_one_and_says_why(
    client: Client, clock: FrozenClock, result: str | bytes, note: str
) -> None:
    client.admin.config_set("result-max-bytes", 1000)
    client.queue("q").put("a.b:c", {}, jid="j1")
    job = popped(client)
    [reply] = client.conn.run_json("complete", W, "j1", job.token, "{}", result, "", "")
    assert reply == {"jid": "j1", "ok": True, "state": "complete"}
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert "rl" not in meta and data == "{}"
    assert meta["h"][-1] == {"e": "completed", "t": clock.now_ms, "w": W, "n": note}
    assert client.get_job("j1").result is None  # type: ignore[union-attr]


@pytest.mark.parametrize("result", ["", "null"])
def test_no_result_and_null_store_nothing(client: Client, clock: FrozenClock, result: str) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    job = popped(client)
    client.conn.run_json("complete", W, "j1", job.token, "{}", result, "", "")
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert "rl" not in meta and "ot" not in meta and data == "{}"
    assert meta["h"][-1] == {"e": "completed", "t": clock.now_ms, "w": W}
    assert client.redis.exists(client.keys.key("output")) == 0


@pytest.mark.parametrize("result", ['"text"', "3.25", "[1,2]", "true", '{"deep":{"a":[1]}}'])
def test_any_json_value_is_a_result(client: Client, clock: FrozenClock, result: str) -> None:
    client.queue("q").put("a.b:c", {"n": 1}, jid="j1")
    popped(client).complete(result=json.loads(result))
    found = client.get_job("j1")
    assert found is not None and found.result == json.loads(result) and found.data == {"n": 1}
    assert client.wait("j1", timeout=0) == json.loads(result)


def test_a_put_refused_fails_the_job_for_good_and_keeps_nothing_it_put(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    client.queue("q").put("a.b:c", {}, jid="taken")
    job = popped(client)
    good = client.queue("n").spec("a.b:c", {}, jid="fine")
    bad = client.queue("n").spec("a.b:c", {}, jid="taken")
    out = Outcomes()
    out.add_complete(
        "j1", job.token or "", result="1", output="tail", puts=[good.to_wire(), bad.to_wire()]
    )
    assert send(client, out) == {"j1": "failed"}
    meta, data = record(client, "j1")  # type: ignore[misc]
    message = (
        "a job it put was refused (JOB_EXISTS): a job with jid taken already exists; "
        "nothing it put was kept, and no result"
    )
    assert meta == {
        "k": "a.b:c",
        "q": "q",
        "s": "failed",
        "r": 5,
        "m": 5,
        "a": 1,
        "pt": clock.now_ms,
        "w": W,
        "l": job.token,
        "lr": "complete",
        "ot": 1,
        "f": {"g": "runtime.PutRefused", "m": message, "t": clock.now_ms, "w": W},
        "h": [
            {"e": "put", "t": clock.now_ms},
            {"e": "popped", "t": clock.now_ms, "w": W},
            {"e": "failed", "t": clock.now_ms, "w": W, "g": "runtime.PutRefused"},
        ],
    }
    assert data == "{}"
    assert client.get_jobs(["fine"]) == [None]
    assert client.get_job("j1").output == "tail"  # type: ignore[union-attr]
    before = snapshot(client)
    assert send(client, out) == {"j1": "failed"}, "the same report again answers the same"
    assert snapshot(client) == before


def test_a_put_waiting_on_its_parent_runs_once_the_parent_completes(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    job = popped(client)
    kid = client.queue("n").spec("a.b:c", {}, jid="kid", depends=["j1"])
    client.leases.complete("j1", W, job.token or "", puts=[kid])
    assert client.get_job("kid").state == "waiting"  # type: ignore[union-attr]
    assert client.get_job("kid").depends == ()  # type: ignore[union-attr]


def test_retry_and_fail_keep_the_output_of_the_last_attempt(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1", retries=1)
    first = popped(client)
    client.leases.retry("j1", W, first.token or "", "app.Boom", "tb", delay=0, output="first try\n")
    assert client.get_job("j1").output == "first try\n"  # type: ignore[union-attr]
    second = popped(client)
    client.leases.fail("j1", W, second.token or "", "app.Boom", "tb", output="é" * 40_000 + "END")
    found = client.get_job("j1")
    assert found is not None and found.state == "failed"
    assert found.output.endswith("END") and len(found.output.encode()) <= 64 * 1024
    assert found.output.startswith("[... cut ")
    third = client.scheduling.requeue("j1")
    assert third == "waiting"
    client.leases.complete("j1", W, popped(client).token or "")
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert "ot" not in meta, "an attempt without output drops the last one's"
    assert client.redis.hexists(client.keys.key("output"), "j1") == 0


def test_requeue_of_a_complete_job_drops_its_result(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {"n": 1}, jid="j1")
    popped(client).complete(result={"v": 1})
    assert client.scheduling.requeue("j1") == "waiting"
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert "rl" not in meta and data == '{"n":1}'
    again = popped(client)
    assert again.job.data == {"n": 1} and again.job.result is None


def test_completing_with_next_keeps_no_result(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {"n": 1}, jid="j1")
    job = popped(client)
    client.leases.complete("j1", W, job.token or "", next="other", result={"v": 1})
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert (meta["s"], meta["q"], data) == ("waiting", "other", '{"n":1}')
    assert "rl" not in meta


def test_retention_removes_the_result_output_and_progress_with_the_job(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("jobs-history-count", 1)
    for jid in ("j1", "j2"):
        client.queue("q").put("a.b:c", {}, jid=jid)
        job = popped(client)
        client.leases.progress(jid, W, job.token or "", 1, 1, "done")
        client.leases.complete(jid, W, job.token or "", result=[jid], output="out " + jid)
        clock.advance(1)
    assert client.get_jobs(["j1"]) == [None]
    for key in ("output", "progress"):
        assert client.redis.hkeys(client.keys.key(key)) == [b"j2"]
    assert client.get_job("j2").result == ["j2"]  # type: ignore[union-attr]
    client.cancel("j2")
    assert raw_record(client, "j2") is None
    for key in ("output", "progress"):
        assert client.redis.exists(client.keys.key(key)) == 0


def test_a_put_at_once_names_its_parent_and_counts_in_its_history(
    client: Client, clock: FrozenClock
) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    popped(client)
    out = Outcomes()
    for jid in ("x", "y"):
        out.add_put(*client.queue("links").spec("a.b:c", {"u": jid}, jid=jid).to_wire(), by="j1")
    out.add_put(*client.queue("links").spec("a.b:c", {}, jid="z").to_wire())
    calls = ops.puts_at_once(out)
    assert [jids for jids, _ in calls] == [["x", "y"], ["z"]], "one all-or-nothing put per job"
    assert [client.conn.call(call) for _, call in calls] == [["x", "y"], ["z"]]
    meta, _ = record(client, "j1")  # type: ignore[misc]
    assert meta["s"] == "running"
    assert meta["h"][-1] == {"e": "puts", "t": clock.now_ms, "c": 2, "j": ["x", "y"]}
    assert record(client, "x")[0]["h"] == [{"e": "put", "t": clock.now_ms, "b": "j1"}]  # type: ignore[index]
    assert record(client, "z")[0]["h"] == [{"e": "put", "t": clock.now_ms}]  # type: ignore[index]


def test_the_history_keeps_the_first_jids_of_many_puts(client: Client, clock: FrozenClock) -> None:
    client.queue("q").put("a.b:c", {}, jid="j1")
    job = popped(client)
    kids = [client.queue("n").spec("a.b:c", {}, jid=f"k{i:02}") for i in range(25)]
    client.leases.complete("j1", W, job.token or "", puts=kids)
    puts = client.get_job("j1").history[-2]  # type: ignore[union-attr]
    assert (puts.event, puts.count, puts.jids) == ("puts", 25, tuple(f"k{i:02}" for i in range(10)))
