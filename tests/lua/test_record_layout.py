"""The stored meta keeps its history last, so the scripts append events without
decoding them; records written by earlier versions (the history anywhere in the
meta) are read as before and take the new layout at their next save; the
scripts read the records they wrote themselves without checking them again,
and anything else in full."""

from __future__ import annotations

import json

import pytest

from runtime import Client
from runtime.config import LIMITS
from tests.conftest import raw_record, record
from tests.support.clock import FrozenClock

# 6.2's scripts read every record in full, 7's functions
# remember theirs: both paths in the default run
pytestmark = pytest.mark.every_version

W = "host-1"


def rewrite(client: Client, jid: str, meta: dict[str, object], data: str) -> None:
    """Stores the record as another writer would: `meta` in its own key order."""
    text = json.dumps(meta, separators=(",", ":")) + "\n" + data
    client.redis.hset(client.keys.key("jobs"), jid, text.encode())


def history_is_last(client: Client, jid: str) -> bool:
    line = (raw_record(client, jid) or b"").partition(b"\n")[0]
    return line.endswith(b"]}") and b',"h":[' in line and b'}],"' not in line


def test_a_record_of_an_earlier_version_with_its_history_first_pops_and_completes(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="old")
    meta, data = record(client, "old")  # type: ignore[misc]
    put_ms = clock.now_ms
    rewrite(client, "old", {"h": meta["h"], **{k: v for k, v in meta.items() if k != "h"}}, data)
    assert not history_is_last(client, "old")
    clock.advance(2)
    [job] = q.pop(1, worker=W)
    assert (job.jid, job.job.data, job.job.put_at_ms) == ("old", {"n": 1}, put_ms)
    assert [e.event for e in job.job.history] == ["put", "popped"]
    assert history_is_last(client, "old"), "saved in the new layout"
    assert job.complete() == "complete"
    meta, _ = record(client, "old")  # type: ignore[misc]
    assert meta["h"] == [
        {"e": "put", "t": put_ms},
        {"e": "popped", "t": clock.now_ms, "w": W},
        {"e": "completed", "t": clock.now_ms, "w": W},
    ]


def test_a_running_record_of_an_earlier_version_with_its_history_inside_completes(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="old", tags=["t1"])
    [job] = q.pop(1, worker=W)
    meta, data = record(client, "old")  # type: ignore[misc]
    fields = list(meta.items())
    middle = dict(fields[:2] + [("h", meta["h"])] + [f for f in fields[2:] if f[0] != "h"])
    rewrite(client, "old", middle, data)
    assert not history_is_last(client, "old")
    assert job.complete() == "complete"
    got = client.get_job("old")
    assert got is not None and got.state == "complete" and got.tags == ("t1",)
    assert [e.event for e in got.history] == ["put", "popped", "completed"]
    assert history_is_last(client, "old")


def test_the_history_keeps_its_first_event_and_the_newest_up_to_history_max(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="j1")
    put_ms = clock.now_ms
    events = LIMITS["history_max"] + 5
    for i in range(events):
        clock.advance(1)
        client.scheduling.set_priority("j1", i % 3)
    meta, _ = record(client, "j1")  # type: ignore[misc]
    history = meta["h"]
    assert len(history) == LIMITS["history_max"]
    assert history[0] == {"e": "put", "t": put_ms}
    assert history[-1]["t"] == clock.now_ms
    assert [e["t"] for e in history[1:]] == sorted(e["t"] for e in history[1:])
    [job] = q.pop(1, worker=W)
    assert len(job.job.history) == LIMITS["history_max"] and job.job.put_at_ms == put_ms


def test_a_record_rewritten_with_other_bytes_after_the_scripts_saved_it_is_checked(
    client: Client, clock: FrozenClock
) -> None:
    """The scripts remember what they wrote; a record whose bytes changed since
    (here: its data, left unread by the completion) is read and checked in full."""
    q = client.queue("q")
    q.put("a.b:c", {"n": 1}, jid="j1")
    meta, _ = record(client, "j1")  # type: ignore[misc]
    rewrite(client, "j1", meta, '{"n":0x10}')
    assert q.pop(1, worker=W) == []
    got = client.get_job("j1")
    assert got is not None and got.failure is not None
    assert got.failure.group == "runtime.CorruptJob"


def test_the_records_the_scripts_remember_are_bounded_in_number(client: Client) -> None:
    """Remembered records are Lua objects the collector walks at every call: a
    server keeps at most two generations of LIMITS["recent_records_max"] of
    them, whatever their bytes, so after 12,000 small puts Lua's heap is about
    as small as after a few hundred. Read as its lowest over the last six
    batches (the collector's low points: the garbage of a batch of 500 comes
    and goes), it grew 1.4 MB with the cap and 6.5 MB without (bench/results,
    round-2026-12-03b)."""
    if int(str(client.redis.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("scripts run by EVALSHA (Redis 6.2) remember nothing between calls")
    q = client.queue("q")
    q.put("a.b:c", {"n": 0})  # the library loaded, its heap's floor

    def lua_bytes() -> int:
        return int(client.redis.info("memory")["used_memory_vm_functions"])

    floor, heaps = lua_bytes(), []
    for first in range(0, 12000, 500):
        client.put_many(q.spec("a.b:c", {"n": n}) for n in range(first, first + 500))
        heaps.append(lua_bytes())
    grown = min(heaps[-6:]) - floor
    assert grown < 3_000_000, f"Lua's heap grew {grown:,} bytes"
