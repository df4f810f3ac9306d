"""A master that meets a full Redis (maxmemory reached, noeviction: `oom`) trims
retention itself before it waits: completed jobs past their window go, memory
is freed, and puts succeed again with no operator's help (issue 28, item 8)."""

from __future__ import annotations

import uuid
from pathlib import Path

from runtime import Client
from runtime.errors import RedisCondition, RedisTransient
from runtime.queue.embedded import ServerProcess
from tests.support import redis_faults
from tests.support.master import MasterProcess
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
BIG = {"blob": "x" * 20_000}  # each job holds ~20 KB
DONE = 60  # completed jobs: ~1.2 MB that retention may let go


def completed(client: Client) -> int:
    return int(client.redis.zcard(client.keys.key("completed")))


def fill_with_finished_work(client: Client) -> None:
    """DONE completed jobs (on a queue no master serves), then, at once (one
    MULTI: no pop of a master between), jobs-history-count 1 (all but one past
    their window) and maxmemory 200 KB below what is used once Redis's own frees
    are done (noeviction)."""
    q = client.queue("finished")
    for i in range(DONE):
        q.put(f"{J}:noop", {**BIG, "i": i})
        [job] = q.pop(1, worker="w")
        job.complete(result={"i": i})
    used = redis_faults.settled_used_memory(client.redis)
    with client.redis.pipeline(transaction=True) as multi:
        multi.hset(client.keys.key("config"), "jobs-history-count", 1)
        multi.config_set("maxmemory-policy", "noeviction")
        multi.config_set("maxmemory", used - 200_000)
        multi.execute()


def puts(client: Client) -> bool:
    try:
        client.queue("idle").put(f"{J}:noop", {"small": True})  # no master runs it
    except RedisTransient as err:
        if err.condition is not RedisCondition.OOM:
            raise
        return False
    return True


def test_a_master_that_meets_oom_trims_retention_and_redis_takes_puts_again(
    own: ServerProcess, workdir: Path
) -> None:
    client = Client.from_url(str(own.url), namespace="t" + uuid.uuid4().hex[:12], retry_for_s=0)
    master = MasterProcess(own, client.keys.namespace, workdir, "q", "-c", "1", "--allow-no-aof")
    try:
        master.start()
        due = client.queue("q").put(f"{J}:noop", {}, delay=5.0)  # popped then: Redis full
        fill_with_finished_work(client)
        assert not puts(client), "Redis is full to start with"
        assert completed(client) == DONE
        wait_for(lambda: completed(client) <= 1, 30, what="the master to trim retention")
        wait_for(lambda: "Redis is full (oom): deleted" in master.log(), 10, what="its log line")
        wait_for(lambda: puts(client), 30, what="a put to succeed once memory is freed")
        wait_for(
            lambda: getattr(client.get_job(due), "state", None) == "complete",
            30,
            what="the job that met the full Redis to run (the newest complete: kept)",
        )
    finally:
        master.close()
        client.close()
