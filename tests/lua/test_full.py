"""Redis full (maxmemory reached, noeviction), on a server filled for real: every
read an operator uses runs (no-writes functions), cancelling jobs, deleting a
failure group and retention free memory (allow-oom), a put fails with the typed
`oom` condition until then, and succeeds after."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from runtime import Client, JobCancelled, NoSuchJob
from runtime.errors import RedisCondition, RedisTransient
from runtime.metrics import families
from runtime.queue import ops
from tests.conftest import _binaries, _short_tmp
from tests.support import redis_faults
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer

BIG = {"blob": "x" * 20_000}  # each job holds ~20 KB


@pytest.fixture(params=_binaries())
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    """A client on a server of the test's own (it is filled to its maxmemory)."""
    server = RedisServer(request.param, _short_tmp("full")).start()
    c = Client.from_url(server.url, namespace="t" + uuid.uuid4().hex[:12], retry_for_s=0)
    try:
        yield c
    finally:
        c.close()
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)


def used_bytes(client: Client) -> int:
    return int(client.redis.info("memory")["used_memory"])


def jobs_bytes(client: Client) -> int:
    """What the hash of job records takes (used_memory moves with the scripts' own
    Lua heap, which its garbage collector frees when it will)."""
    return int(client.redis.memory_usage(client.keys.key("jobs"), samples=0) or 0)


def fill(client: Client) -> list[str]:
    """Sets maxmemory 1 MB above what is used, puts jobs until Redis refuses one,
    then lowers maxmemory under what is used; returns the jids put."""
    client.redis.config_set("maxmemory-policy", "noeviction")
    client.redis.config_set("maxmemory", used_bytes(client) + 1_000_000)
    q, jids = client.queue("q"), []
    for _ in range(200):  # 1 MB is about 50 such jobs
        try:
            jids.append(q.put("app.jobs:run", BIG))
        except RedisTransient as err:
            if err.condition is not RedisCondition.OOM:
                raise
            # full by a few bytes only, and Redis frees some 100s of KB on its own
            # soon after: enough for one more put. Wait for that, then set the
            # limit under it.
            used = redis_faults.settled_used_memory(client.redis)
            client.redis.config_set("maxmemory", used - 100_000)
            return jids
    raise AssertionError("Redis never filled up")


def refused_put(client: Client) -> RedisTransient:
    with pytest.raises(RedisTransient) as caught:
        client.queue("q").put("app.jobs:run", BIG)
    return caught.value


def test_a_full_redis_answers_every_read_frees_memory_on_request_then_takes_puts(
    client: Client,
) -> None:
    clock = FrozenClock(client.redis, client.keys)
    q = client.queue("q")
    for i in range(10):  # a failure group of ~400 KB, and 5 completed jobs
        q.put("app.jobs:run", {**BIG, "i": i}, jid=f"f{i}", retries=0)
        [job] = q.pop(1, worker="w")
        job.fail("app.Boom", "boom")
    for i in range(5):
        q.put("app.jobs:run", BIG, jid=f"done{i}")
        [job] = q.pop(1, worker="w")
        job.complete(result={"i": i})
    day = datetime.fromtimestamp(clock.now_us / 1e6, UTC).date()
    clock.advance(8 * 86400)  # past jobs-history: retention may delete them
    jids = fill(client)
    assert refused_put(client).condition is RedisCondition.OOM

    reads: dict[str, Any] = {
        "status": client.status(),
        "peek": [j.jid for j in q.peek(3)],
        "get_job": client.get_job(jids[0]),
        "message_status": client.message_status(jids[0]),
        "failed": client.failed(),
        "failed_jobs": client.admin.failed_jobs("app.Boom", 0, 3)[0],
        "jobs": client.admin.jobs("q", "waiting", 0, 3)[0],
        "stats": client.admin.stats("q", day).failed,
        "workers": client.admin.workers(),
        "domains": client.admin.domains(),
        "metrics": families(client.admin.snapshot()),  # what /metrics and the dashboard read
    }
    assert reads["status"]["q"]["waiting"] == len(jids)
    assert reads["peek"] == jids[:3]
    assert reads["get_job"] is not None and reads["get_job"].state == "waiting"
    assert reads["message_status"] == "queued"
    assert reads["failed"] == {"app.Boom": 10} and reads["failed_jobs"] == 10
    assert reads["jobs"] == len(jids) and reads["stats"] == 10
    assert "w" in reads["workers"] and reads["metrics"]

    before = used_bytes(client)
    assert client.admin.trim_retention() == 5, "retention runs while Redis is full"
    assert client.cancel(*jids[:5]) == jids[:5]
    assert used_bytes(client) < before, "a cancel frees memory"
    assert client.admin.delete_failed("app.Boom") == 10
    assert client.failed() == {}
    assert used_bytes(client) < before - 10 * len(BIG["blob"])
    jid = q.put("app.jobs:run", BIG)
    assert client.get_job(jid) is not None, "room again: puts succeed"


def test_the_reads_run_on_a_replica_where_writes_are_refused(client: Client) -> None:
    jid = client.queue("q").put("app.jobs:run", {"n": 1})
    with redis_faults.readonly(client.redis):
        assert client.status()["q"]["waiting"] == 1
        assert [j.jid for j in client.queue("q").peek(3)] == [jid]
        assert client.get_job(jid) is not None and client.failed() == {}
        assert families(client.admin.snapshot())
        with pytest.raises(RedisTransient) as caught:
            client.queue("q").put("app.jobs:run", {})
        assert caught.value.condition is RedisCondition.READONLY


def test_a_cancel_on_a_full_redis_frees_and_leaves_tombstones_where_it_made_room(
    client: Client,
) -> None:
    client.queue("q").put("app.jobs:run", {}, jid="first")  # the scripts are loaded
    jids = fill(client)
    assert refused_put(client).condition is RedisCondition.OOM
    before = jobs_bytes(client)
    assert client.cancel(*jids) == jids
    assert jobs_bytes(client) < before - (len(jids) - 1) * len(BIG["blob"]), "data freed"
    # ~1 MB freed: room for the tombstones (used_memory also counts the scripts'
    # Lua heap, which moves by some 100 KB with its garbage)
    assert client.queue("q").counts()["cancelled"] == len(jids)
    job = client.get_job(jids[0])
    assert job is not None and job.state == "cancelled" and job.data == {}
    client.redis.config_set("maxmemory", 0)  # a wait registers: a write
    with pytest.raises(JobCancelled):
        client.wait(jids[0], timeout=0.1)


def test_a_cancel_far_over_maxmemory_succeeds_without_a_tombstone(client: Client) -> None:
    client.queue("q").put("app.jobs:run", BIG, jid="awaited")
    waiter = client.conn.call(ops.wait("awaited", 60_000))  # a waiter's token to push, too
    assert waiter.state == "waiting"
    jids = fill(client)
    client.redis.config_set("maxmemory", used_bytes(client) // 2)  # far over: no room made
    assert refused_put(client).condition is RedisCondition.OOM
    before = jobs_bytes(client)
    assert client.cancel("awaited", jids[0]) == ["awaited", jids[0]]
    assert jobs_bytes(client) < before - 2 * len(BIG["blob"]), "a cancel frees memory"
    assert client.get_job("awaited") is None and client.get_job(jids[0]) is None
    assert client.redis.lrange(client.keys.waited("awaited"), 0, -1) == [b"cancelled"]
    assert client.queue("q").counts()["cancelled"] == 0
    client.redis.config_set("maxmemory", 0)  # a wait registers: a write
    with pytest.raises(NoSuchJob) as caught:
        client.wait("awaited", timeout=0.1)
    assert not isinstance(caught.value, JobCancelled)
