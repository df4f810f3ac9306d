"""compact-records unset (-1, the default): a put stores a queued job compact
when every registered master reads compact records, else JSON (lib/compact.lua,
Compact.enabled). Registered: a master seen within the hour that told its info
(worker_info.lua); one whose info tells no `records` runs a release before
compact records. The finding is kept in {ns}:record-forms for 10 s, and for
as long by the server that made it (its function library's memory), so a put
reads at most one key, and none while its server's finding lasts; 0 and 1 are
kept as set, whatever the masters."""

from __future__ import annotations

import json

from runtime import Client
from tests.conftest import raw_record
from tests.support.clock import FrozenClock

KEPT_MS = 10_000


def stored_compact(client: Client, jid: str) -> bool:
    line = (raw_record(client, jid) or b"").partition(b"\n")[0]
    assert line, f"no record for {jid}"
    return not line.startswith(b"{")


def put(client: Client, jid: str) -> str:
    return client.queue("q").put("a.b:c", {"n": 1}, jid=jid)


def runs_functions(client: Client) -> bool:
    """Redis 7 runs the scripts as a function library (FCALL), 6.2 by EVALSHA."""
    return int(str(client.redis.info("server")["redis_version"]).split(".")[0]) >= 7


def register_new(client: Client, worker: str = "new-8") -> None:
    client.leases.register_worker(worker, host="new", pid=8, queues=["q"], concurrency=1)


def register_older(client: Client, clock: FrozenClock, worker: str = "old-7") -> None:
    """What a master of an earlier release stores: its info without `records`."""
    info = {"host": "old", "pid": 7, "concurrency": 1, "queues": ["q"]}
    client.redis.set(client.keys.key("worker_info", worker=worker), json.dumps(info), ex=3600)
    client.redis.zadd(client.keys.key("workers"), {worker: clock.now_ms})


def forget_finding(client: Client, clock: FrozenClock) -> None:
    """What 10 s do to the kept finding: its key expires, its server's span ends."""
    client.redis.delete(client.keys.key("record_forms"))
    clock.advance(KEPT_MS / 1000)


def test_unset_is_the_default_and_with_no_master_registered_a_put_stores_compact(
    client: Client, clock: FrozenClock
) -> None:
    assert client.admin.config_get()["compact-records"] == -1
    put(client, "j1")
    assert stored_compact(client, "j1")
    assert client.get_job("j1").state == "waiting"  # type: ignore[union-attr]


def test_with_only_masters_of_this_release_a_put_stores_compact(
    client: Client, clock: FrozenClock
) -> None:
    register_new(client, "new-8")
    register_new(client, "new-9")
    put(client, "j1")
    assert stored_compact(client, "j1")


def test_an_older_master_registered_makes_puts_store_json_until_it_is_gone(
    client: Client, clock: FrozenClock
) -> None:
    register_new(client)
    register_older(client, clock)
    put(client, "j1")
    assert not stored_compact(client, "j1")
    client.redis.delete(client.keys.key("worker_info", worker="old-7"))  # its hour is up
    put(client, "j2")
    assert not stored_compact(client, "j2"), "the finding is kept for a while"
    forget_finding(client, clock)
    put(client, "j3")
    assert stored_compact(client, "j3")
    assert [client.get_job(j).data for j in ("j1", "j2", "j3")] == [{"n": 1}] * 3  # type: ignore[union-attr]


def test_an_older_master_that_registers_later_is_seen_once_the_finding_expires(
    client: Client, clock: FrozenClock
) -> None:
    put(client, "j1")
    assert stored_compact(client, "j1")
    ttl_ms = client.redis.pttl(client.keys.key("record_forms"))
    assert 0 < ttl_ms <= KEPT_MS
    register_older(client, clock)
    forget_finding(client, clock)
    put(client, "j2")
    assert not stored_compact(client, "j2")


def test_masters_that_never_told_who_they_are_or_were_seen_over_an_hour_ago_do_not_count(
    client: Client, clock: FrozenClock
) -> None:
    register_older(client, clock)
    clock.advance(3601)
    client.queue("other").pop(1, worker="unregistered-1")  # seen now, no info
    put(client, "j1")
    assert stored_compact(client, "j1")


def test_zero_and_one_are_kept_as_set_whatever_the_masters(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("compact-records", "0")
    put(client, "j1")
    assert not stored_compact(client, "j1")
    register_older(client, clock)
    client.admin.config_set("compact-records", "1")  # the CLI's --force
    put(client, "j2")
    assert stored_compact(client, "j2")
    client.admin.config_unset("compact-records")
    put(client, "j3")
    assert not stored_compact(client, "j3")


def test_within_its_span_the_servers_own_finding_serves_without_reading_the_key(
    client: Client, clock: FrozenClock
) -> None:
    put(client, "j1")
    assert stored_compact(client, "j1")
    client.redis.set(client.keys.key("record_forms"), "1")  # not what this server found
    clock.advance(KEPT_MS / 1000 - 0.001)
    put(client, "j2")
    if runs_functions(client):
        assert stored_compact(client, "j2"), "the server's finding, not the key"
    else:  # EVALSHA scripts keep nothing from one call to the next: the key says
        assert not stored_compact(client, "j2")
    clock.advance(0.001)  # its span is over: the key says again
    put(client, "j3")
    assert not stored_compact(client, "j3")


def test_a_clock_that_went_back_ends_the_servers_finding(
    client: Client, clock: FrozenClock
) -> None:
    put(client, "j1")
    assert stored_compact(client, "j1")
    register_older(client, clock)
    client.redis.delete(client.keys.key("record_forms"))
    clock.set(clock.now_us - 1)
    put(client, "j2")
    assert not stored_compact(client, "j2")
