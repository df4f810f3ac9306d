"""Records that do not decode, written over real jobs with raw commands: every
script that meets one fails that job (group runtime.CorruptJob, the raw bytes
kept, escaped, in its failure) before writing anything else about it, takes it
out of where it sat, and goes on; nothing undecodable reaches a reply."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from runtime import Client, LeaseLost
from runtime.config import LIMITS
from tests.conftest import raw_record, record
from tests.support.clock import FrozenClock

GROUP = "runtime.CorruptJob"


@pytest.fixture(autouse=True)
def json_records(client: Client) -> None:
    """The kinds are made by editing a JSON meta's text, so queued jobs are
    stored JSON here (a compact one corrupt: test_compact_records.py)."""
    client.admin.config_set("compact-records", "0")


@dataclass(frozen=True)
class Kind:
    """A way a stored record can be corrupt: the bytes written over a job's
    record (from its meta's text), what the scripts say is wrong, whether its
    meta is kept, and whether it still says where the job sat (then it is
    taken out of there at once, whoever meets it)."""

    make: Callable[[str], bytes]
    problem: str
    sound_meta: bool
    located: bool | None = None  # default: sound_meta

    @property
    def placed(self) -> bool:
        return self.sound_meta if self.located is None else self.located


def deep(levels: int) -> str:
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


# Met by every read: the scripts cannot use the record at all.
RECORD_KINDS = {
    "no-newline": Kind(lambda m: m.encode(), "no newline between meta and data", False),
    "meta-not-json": Kind(lambda m: b'{"k":"a.b:c",\n{}', "meta not a JSON object", False),
    "pickle": Kind(
        lambda m: pickle.dumps({"to": "a@b.c"}, protocol=4),
        "no newline between meta and data",
        False,
    ),
    "meta-missing-fields": Kind(
        lambda m: b'{"k":"a.b:c","s":"waiting"}\n{}',
        "meta lacks a field (k, q, s, r, m or h) or has it of the wrong type",
        False,
    ),
    "meta-bad-type": Kind(
        lambda m: m.replace('"r":5', '"r":"five"').encode() + b"\n{}",
        "meta lacks a field (k, q, s, r, m or h) or has it of the wrong type",
        False,
    ),
}
# Met by reads whose reply carries the record (pop, get, peek, failed): Python
# could not decode it.
REPLY_KINDS = {
    "data-not-utf8": Kind(lambda m: m.encode() + b'\n{"to":"\xff\xfe"}', "not valid UTF-8", True),
    "meta-not-utf8": Kind(
        lambda m: m.replace('"k":"a.b:c"', '"k":"a.b:\xe9t\xe9"').encode("latin-1") + b"\n{}",
        "not valid UTF-8",
        False,  # not kept, Python could not read it; but it says where it sat
        located=True,
    ),
    "data-not-json": Kind(lambda m: m.encode() + b'\n{"to":}', "data not valid JSON", True),
    "data-hex-number": Kind(lambda m: m.encode() + b'\n{"n":0x10}', "data not valid JSON", True),
    "data-too-deep": Kind(
        lambda m: (m + "\n" + deep(101)).encode(), "data nested deeper than 100 levels", True
    ),
    "data-array": Kind(lambda m: m.encode() + b"\n[1]", "data not a JSON object", True),
}
KINDS = {**RECORD_KINDS, **REPLY_KINDS}


def corrupt(client: Client, jid: str, kind: Kind) -> bytes:
    """Writes `kind` over the record of `jid`; returns the bytes written."""
    meta_text = (raw_record(client, jid) or b"").decode().partition("\n")[0]
    raw = kind.make(meta_text)
    client.redis.hset(client.keys.key("jobs"), jid, raw)
    return raw


def escaped(raw: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02x}" for b in raw)


def failure(jid: str, kind: Kind, raw: bytes, now_ms: int) -> dict[str, Any]:
    kept = raw[: LIMITS["corrupt_kept_bytes"]]
    shown = f", the first {len(kept)}" if len(kept) < len(raw) else ""
    message = (
        f"the stored record of {jid} does not decode ({kind.problem}); it was taken out of "
        f"its queue. The record, {len(raw)} bytes{shown}, other than printable ASCII as "
        f"\\xHH:\n{escaped(kept)}"
    )
    return {"g": GROUP, "m": message, "t": now_ms}


def failed_record(
    jid: str, kind: Kind, raw: bytes, now_ms: int, before: dict[str, Any], queue: str
) -> dict[str, Any]:
    """The whole meta a corrupt record is replaced with: its own (minus its place
    in the queue) when sound, else a minimal one naming the queue it was met in."""
    event = {"e": "failed", "t": now_ms, "g": GROUP}
    if kind.sound_meta:
        meta = {k: v for k, v in before.items() if k not in ("o", "d", "lr")}
        meta["h"] = [*before["h"], event]
    else:
        meta = {"k": "", "q": "q" if kind.placed else queue, "r": 0, "m": 0, "h": [event]}
    return {**meta, "s": "failed", "cr": 1, "f": failure(jid, kind, raw, now_ms)}


def queued(client: Client, jid: str, queue: str = "q") -> dict[str, Any]:
    client.queue(queue).put("a.b:c", {"to": "a@b.c"}, jid=jid)
    found = record(client, jid)
    assert found is not None
    return found[0]


def lane_entries(client: Client, queue: str = "q") -> list[str]:
    key = client.keys.key("lane", queue=queue, prio=0, domain="")
    return [j if isinstance(j, str) else j.decode() for j in client.redis.lrange(key, 0, -1)]


@pytest.mark.parametrize("name", KINDS)
def test_a_pop_fails_a_corrupt_head_and_returns_the_good_jobs_behind_it(
    client: Client, clock: FrozenClock, name: str
) -> None:
    kind = KINDS[name]
    before = queued(client, "bad")
    queued(client, "good1")
    queued(client, "good2")
    raw = corrupt(client, "bad", kind)
    jobs = client.queue("q").pop(5, worker="w")
    assert [j.jid for j in jobs] == ["good1", "good2"]
    assert [j.job.data for j in jobs] == [{"to": "a@b.c"}] * 2
    assert record(client, "bad") == (
        failed_record("bad", kind, raw, clock.now_ms, before, "q"),
        "{}",
    )
    assert client.failed() == {GROUP: 1}
    assert lane_entries(client) == []
    assert client.queue("q").counts()["waiting"] == 0
    queued(client, "good3")
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good3"]
    assert client.failed() == {GROUP: 1}, "never met again"


@pytest.mark.parametrize("name", KINDS)
def test_get_answers_the_failed_record_writes_nothing_and_the_next_pop_fails_it(
    client: Client, clock: FrozenClock, name: str
) -> None:
    kind = KINDS[name]
    before = queued(client, "bad")
    queued(client, "good")
    raw = corrupt(client, "bad", kind)
    job = client.get_job("bad")
    assert job is not None and job.state == "failed" and job.data == {}
    assert job.failure is not None and job.failure.group == GROUP
    assert raw_record(client, "bad") == raw, "a read (no-writes) leaves the record as it is"
    assert client.get_job("bad") == job, "read again: the same failed record"
    assert client.message_status("bad") == "done-awaiting-gc"
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]
    assert record(client, "bad") == (
        failed_record("bad", kind, raw, clock.now_ms, before, "q"),
        "{}",
    )
    failed = client.get_job("bad")
    assert failed is not None and failed.failure == job.failure, "as the read showed it"
    assert lane_entries(client) == [] and client.queue("q").counts()["waiting"] == 0
    assert client.failed() == {GROUP: 1}


@pytest.mark.parametrize("name", KINDS)
def test_peek_lists_the_failed_record_where_a_pop_would_meet_it(
    client: Client, clock: FrozenClock, name: str
) -> None:
    queued(client, "bad")
    queued(client, "good")
    raw = corrupt(client, "bad", KINDS[name])
    peeked = client.queue("q").peek(5)
    assert [(j.jid, j.state) for j in peeked] == [("bad", "failed"), ("good", "waiting")]
    assert raw_record(client, "bad") == raw and client.failed() == {}, "peek writes nothing"
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]
    assert client.failed() == {GROUP: 1}


@pytest.mark.parametrize("name", RECORD_KINDS)
def test_heartbeat_and_reports_of_a_corrupt_running_job_lose_the_lease(
    client: Client, clock: FrozenClock, name: str
) -> None:
    queued(client, "j1")
    [job] = client.queue("q").pop(1, worker="w")
    raw = corrupt(client, "j1", RECORD_KINDS[name])
    assert client.leases.heartbeat("w", {"j1": job.token or ""}).lost == ("j1",)
    meta, data = record(client, "j1")  # type: ignore[misc]
    assert meta["f"] == failure("j1", RECORD_KINDS[name], raw, clock.now_ms) and data == "{}"
    # a meta that was lost does not say which running set holds it: that entry
    # goes when the lease runs out (test_an_expired_lease_on_a_corrupt_record...)
    assert client.redis.scard(client.keys.key("worker_jobs", worker="w")) == 0
    reports: list[Callable[[], str]] = [
        job.complete,
        lambda: job.fail("g", "m"),
        lambda: job.retry("g", "m"),
    ]
    for report in reports:
        with pytest.raises(LeaseLost, match="CorruptJob"):
            report()
    assert client.failed() == {GROUP: 1}


@pytest.mark.parametrize("name", RECORD_KINDS)
def test_complete_of_a_corrupt_running_job_fails_it_and_answers_lease_lost(
    client: Client, clock: FrozenClock, name: str
) -> None:
    queued(client, "j1")
    [job] = client.queue("q").pop(1, worker="w")
    corrupt(client, "j1", RECORD_KINDS[name])
    with pytest.raises(LeaseLost, match="CorruptJob"):
        job.complete()
    assert client.get_job("j1").state == "failed"  # type: ignore[union-attr]
    assert client.redis.scard(client.keys.key("worker_jobs", worker="w")) == 0
    assert client.failed() == {GROUP: 1}


@pytest.mark.parametrize("name", REPLY_KINDS)
def test_reports_do_not_read_the_data_the_next_reply_does(
    client: Client, clock: FrozenClock, name: str
) -> None:
    """Heartbeat and complete use the meta only (decoding big data at every
    renewal would cost the whole deployment); the data is checked where it is
    replied, so a read shows the job failed."""
    queued(client, "j1")
    [job] = client.queue("q").pop(1, worker="w")
    corrupt(client, "j1", REPLY_KINDS[name])
    assert client.leases.heartbeat("w", {"j1": job.token or ""}).renewed == ("j1",)
    assert job.complete() == "complete"
    assert client.get_job("j1").failure.group == GROUP  # type: ignore[union-attr]
    assert client.failed() == {}, "a read (no-writes) shows it failed, and fails nothing"


@pytest.mark.parametrize("name", KINDS)
def test_cancel_deletes_a_corrupt_job_and_the_next_pop_drops_what_is_left(
    client: Client, clock: FrozenClock, name: str
) -> None:
    queued(client, "bad")
    queued(client, "good")
    corrupt(client, "bad", KINDS[name])
    assert client.cancel("bad") == ["bad"]
    tomb = client.get_job("bad")  # bad data goes with the rest: a sound meta leaves a tombstone
    if name in RECORD_KINDS or name == "meta-not-utf8":
        assert raw_record(client, "bad") is None
    else:
        assert tomb is not None and tomb.state == "cancelled" and tomb.data == {}
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]
    assert lane_entries(client) == [] and client.queue("q").counts()["waiting"] == 0
    assert client.failed() == {}


@pytest.mark.parametrize("name", KINDS)
def test_an_expired_lease_on_a_corrupt_record_is_failed_not_reclaimed(
    client: Client, clock: FrozenClock, name: str
) -> None:
    queued(client, "bad")
    queued(client, "good")
    [held] = client.queue("q").pop(1, worker="dead")
    corrupt(client, held.jid, KINDS[name])
    clock.advance(61)
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]
    assert client.get_job("bad").failure.group == GROUP  # type: ignore[union-attr]
    assert client.redis.zcard(client.keys.key("running", queue="q")) == 1  # good, now
    assert client.failed() == {GROUP: 1}


@pytest.mark.parametrize("name", KINDS)
def test_a_corrupt_scheduled_job_is_failed_when_it_comes_due(
    client: Client, clock: FrozenClock, name: str
) -> None:
    client.queue("q").put("a.b:c", {}, jid="bad", delay=5)
    client.queue("q").put("a.b:c", {}, jid="good", delay=6)
    corrupt(client, "bad", KINDS[name])
    clock.advance(7)
    assert [j.jid for j in client.queue("q").pop(5, worker="w")] == ["good"]
    assert client.redis.zcard(client.keys.key("scheduled", queue="q")) == 0
    assert client.get_job("bad").failure.group == GROUP  # type: ignore[union-attr]


@pytest.mark.parametrize("name", RECORD_KINDS)
def test_retention_fails_a_corrupt_completed_job_instead_of_deleting_it(
    client: Client, clock: FrozenClock, name: str
) -> None:
    client.admin.config_set("jobs-history", 10)
    for jid in ("bad", "old"):
        queued(client, jid)
        [job] = client.queue("q").pop(1, worker="w")
        job.complete()
    corrupt(client, "bad", RECORD_KINDS[name])
    clock.advance(11)
    assert client.queue("q").pop(1, worker="w") == []
    assert raw_record(client, "old") is None
    assert client.get_job("bad").failure.group == GROUP  # type: ignore[union-attr]
    assert client.redis.zcard(client.keys.key("completed")) == 0
    assert client.failed() == {GROUP: 1}


def test_a_pop_drops_at_most_drop_batch_entries_then_asks_again(
    client: Client, clock: FrozenClock
) -> None:
    n = LIMITS["drop_batch"] + 20
    for i in range(n):
        queued(client, f"bad{i}")
        client.redis.hset(client.keys.key("jobs"), f"bad{i}", b"\x80\x04garbage")
    queued(client, "good")
    first = client.conn.run_json("pop", "w", 1, "seed", "ordered", 0, 0, "q")
    assert (first["jobs"], first["wake_in_ms"]) == ([], 0), "stopped short: ask again at once"
    assert client.failed() == {GROUP: LIMITS["drop_batch"]}
    [job] = client.queue("q").pop(1, worker="w")
    assert job.jid == "good" and client.failed() == {GROUP: n}


def test_a_corrupt_job_handed_to_an_idle_master_is_failed_and_the_next_handed(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("d.example", rate=1, period=3600)
    q = client.queue("q")
    q.put("a.b:c", {}, jid="first", domain="d.example")
    assert [j.jid for j in q.pop(1, worker="w")] == ["first"]  # spends the domain's budget
    q.put("a.b:c", {}, jid="bad", domain="d.example")
    q.put("a.b:c", {"n": 2}, jid="good", domain="d.example")
    corrupt(client, "bad", RECORD_KINDS["pickle"])
    idle = client.conn.run_json("pop", "m1", 2, "seed", "ordered", 0, 1, "q")
    assert idle["jobs"] == [], "both throttled: m1 waits, registered"
    client.scheduling.clear_domain_limit("d.example")  # the lane is ready: handed at once
    handed = client.redis.lrange(client.keys.key("worker_wake", worker="m1"), 0, -1)
    assert [json.loads(h)["jid"] for h in handed] == ["good"]
    assert client.get_job("bad").failure.group == GROUP  # type: ignore[union-attr]


def test_garbage_on_a_masters_handoff_list_never_reaches_its_pop_reply(
    client: Client, clock: FrozenClock
) -> None:
    key = client.keys.key("worker_wake", worker="m1")
    client.redis.rpush(key, b'{"jid":"x"', b"\x80\x04", b'{"jid":"x","meta":{"l":"\xff"}}', b"1")
    queued(client, "good")
    reply = client.conn.run_json("pop", "m1", 5, "seed", "ordered", 0, 1, "q")
    assert [j["jid"] for j in reply["jobs"]] == ["good"]
    assert client.redis.llen(key) == 0
    assert int(client.conn.run("forget_worker", "m1", "q")) == 1
