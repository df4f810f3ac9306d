"""compact-records unset (-1, the default): a put stores a queued job compact
when every registered master reads compact records, else JSON (lib/compact.lua,
Compact.enabled). Registered: a master seen within the hour that told its info
(worker_info.lua); one whose info tells no `records` runs a release before
compact records. The finding is kept in {ns}:record-forms for 10 s, so a put
reads one key; 0 and 1 are kept as set, whatever the masters."""

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


def register_new(client: Client, worker: str = "new-8") -> None:
    client.leases.register_worker(worker, host="new", pid=8, queues=["q"], concurrency=1)


def register_older(client: Client, clock: FrozenClock, worker: str = "old-7") -> None:
    """What a master of an earlier release stores: its info without `records`."""
    info = {"host": "old", "pid": 7, "concurrency": 1, "queues": ["q"]}
    client.redis.set(client.keys.key("worker_info", worker=worker), json.dumps(info), ex=3600)
    client.redis.zadd(client.keys.key("workers"), {worker: clock.now_ms})


def forget_finding(client: Client) -> None:
    """What 10 s do to the kept finding."""
    client.redis.delete(client.keys.key("record_forms"))


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
    forget_finding(client)
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
    forget_finding(client)
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
