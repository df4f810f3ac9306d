"""Masters on a Redis Cluster of three primaries (issue 21): the worker's basic
tests through a redis+cluster:// URL, and a migration of the namespace's slot
to another node in the middle of a drain, which loses no job.

While the slot migrates (IMPORTING/MIGRATING, MIGRATE of its keys a batch at
a time) every call is answered ASK by the source or MOVED back by the target
and waits (runtime.queue.routing); once the slot has its new owner, the
masters follow MOVED there and load the function library on it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from runtime import AsyncClient, Client
from runtime.queue.keys import Keys
from runtime.vocabulary import JobState
from tests.integration.test_worker_basics import (  # noqa: F401 - collected here, on the cluster
    test_an_idle_master_only_blocks_waiting_for_work,
    test_async_jobs_run_on_uvloop,
    test_jobs_complete_retry_and_fail,
    test_runtime_workers_lists_a_live_master_and_its_jobs,
)
from tests.support.fault_run import FaultRun
from tests.support.master import MasterProcess
from tests.support.topologies import Cluster, cluster_client, command, running_cluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from running_cluster()


@pytest.fixture
def plain_client(cluster: Cluster) -> Iterator[Client]:
    yield from cluster_client(cluster)


@pytest.fixture
def start_master(cluster: Cluster, plain_client: Client, workdir: Path) -> Iterator[object]:
    masters: list[MasterProcess] = []

    def start(queues: str = "q", *args: str, ready: bool = True) -> MasterProcess:
        master = MasterProcess(
            cluster.nodes[0].process,
            plain_client.keys.namespace,
            workdir,
            queues,
            *args,
            url=cluster.url(),
        )
        masters.append(master)
        return master.start(ready=ready)

    yield start
    for master in masters:
        master.close()


def test_a_migration_of_the_namespaces_slot_during_a_drain_loses_no_job(
    cluster: Cluster, workdir: Path
) -> None:
    namespace = "mig" + uuid.uuid4().hex[:6]
    run = FaultRun(cluster.nodes[0].process, workdir, namespace=namespace, url=cluster.url())
    try:
        run.start_masters(url=cluster.url())
        run.running(long_s=3.0, short_n=200, short_s=0.02)
        slot = key_slot(run.client.keys.root.encode())
        source = cluster.owner(slot)
        target = next(node for node in cluster.nodes if node is not source)
        moved = cluster.migrate_slot(slot, target, batch=5, pause_s=0.05)
        assert moved > 10, "the namespace's keys moved a few at a time"
        assert cluster.owner(slot) is target
        run.assert_resumes(run.hold(0, "the migration"))
        run.assert_nothing_lost()
        run.assert_alive()
        assert not command(source.conn(), "CLUSTER", "COUNTKEYSINSLOT", slot)
        libraries = command(target.conn(), "FUNCTION", "LIST")
        assert libraries, "the masters loaded the function library on the slot's new owner"
        wait_for(
            lambda: run.client.conn.route.url.endswith(f":{target.port}/0"),
            5,
            what="the client to follow the slot",
        )
    finally:
        run.close()


def test_an_async_client_started_at_another_node_follows_moved_to_its_namespace(
    cluster: Cluster,
) -> None:
    """AsyncClient drives its calls with the master's loop (runtime.queue.aplan):
    started at a seed that does not own the namespace's slot, its first call is
    answered MOVED and sent again to the owner, where the job lands (no retry:
    the call itself follows)."""
    names = ("a" + uuid.uuid4().hex[:12] for _ in range(50))
    namespace = next(
        n for n in names if cluster.owner(key_slot(Keys(n).root.encode())) is not cluster.nodes[0]
    )
    owner = cluster.owner(key_slot(Keys(namespace).root.encode()))

    async def put_and_read() -> tuple[str, JobState | None, str]:
        async with AsyncClient(cluster.url(), namespace=namespace, retry_for_s=0) as client:
            jid = await client.queue("q").put("tests.integration.jobs:noop")
            job = await client.get_job(jid)
            return jid, job.state if job else None, client.conn.route.url

    jid, state, url = asyncio.run(put_and_read())
    assert state is JobState.WAITING
    assert url.endswith(f":{owner.port}/0"), "the route follows the slot's owner"
    with Client.from_url(cluster.url(), namespace=namespace) as client:
        job = client.get_job(jid)
        assert job is not None and job.state is JobState.WAITING
