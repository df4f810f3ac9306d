"""A sharded site on a Redis Cluster of three primaries (issue 21, part 3):
three namespaces whose slots live on the three nodes, one `runtime worker`
serving the queues of all three (a master per namespace under a supervisor),
jobs routed by queue; the counts and the dashboard's numbers add up, and what
cannot cross a shard is refused."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from runtime import config
from runtime.dashboard import reads
from runtime.errors import CrossShard
from runtime.queue.site import Site
from tests.support.master import MasterProcess
from tests.support.topologies import Cluster, running_cluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
JOBS = "tests.integration.jobs"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from running_cluster()


def namespaces_on_every_node(cluster: Cluster) -> list[str]:
    """One namespace per node: each one's slot is owned by a different node."""
    tag = uuid.uuid4().hex[:6]
    found: dict[int, str] = {}
    for i in range(1000):
        namespace = f"s{tag}{i}"
        port = cluster.owner(key_slot(("{" + namespace + "}").encode())).port
        found.setdefault(port, namespace)
        if len(found) == len(cluster.nodes):
            return list(found.values())
    raise AssertionError("no namespace for every node")


def test_three_namespaces_on_three_nodes_act_as_one_site(cluster: Cluster, workdir: Path) -> None:
    a, b, c = namespaces_on_every_node(cluster)
    rule = f"{a}:qa;{b}:qb;{c}:qc,*"
    site = Site(settings=config.Settings(url=cluster.url(), namespace=a, shards=rule))
    master = MasterProcess(
        cluster.nodes[0].process,
        a,
        workdir,
        "qa,qb,qc",
        env={"RUNTIME_SHARDS": rule},
        url=cluster.url(),
    )
    try:
        master.start()
        puts = {"qa": 30, "qb": 20, "qc": 10}
        jids = [
            site.queue(q).put(f"{JOBS}:noop", {"i": i}) for q, n in puts.items() for i in range(n)
        ]
        failing = site.queue("qb").put(f"{JOBS}:fail", retries=0)
        # a job of qa putting into qc (another shard) fails, and puts nothing
        crossing = site.queue("qa").put(
            f"{JOBS}:put_follow_ups", {"queue": "qc", "count": 1}, retries=0
        )
        done = {"qa": 30, "qb": 20, "qc": 10}

        def settled() -> bool:
            counts = site.status()
            finished = all(counts.get(q, {}).get("complete") == n for q, n in done.items())
            return finished and sum(site.failed().values()) == 2

        wait_for(settled, 60, what="every job to end")
        for jid in jids[:3] + jids[-3:]:
            assert site.wait(jid, timeout=5) is None
        for namespace, queue in ((a, "qa"), (b, "qb"), (c, "qc")):
            client = site.clients[namespace]
            assert client.queues() == [queue], "each queue lives in its own namespace only"
            assert cluster.owner(key_slot(client.keys.root.encode())).port == int(
                client.conn.route.url.rsplit(":", 1)[1].split("/")[0]
            )
        assert len({site.clients[ns].conn.route.url for ns in (a, b, c)}) == 3, "three nodes"

        # the site's numbers are the sum of the namespaces' (what each dashboard shows)
        status = site.status()
        assert {q: status[q]["complete"] for q in done} == done
        assert status["qb"]["failed"] == 1 and status["qa"]["failed"] == 1
        rows = [row for ns in (a, b, c) for row in reads.queue_rows(site.clients[ns])]
        assert {row.name: row.counts["complete"] for row in rows} == done
        totals = [reads.totals(site.clients[ns]) for ns in (a, b, c)]
        assert sum(t[0] for t in totals) == sum(done.values())
        assert sum(t[1] for t in totals) == 2
        assert sum(site.failed().values()) == 2
        crossed = site.get_job(crossing)
        assert crossed is not None and crossed.state == "failed"
        assert crossed.failure is not None and crossed.failure.group.endswith("CrossShard")
        assert f"shard '{c}'" in crossed.failure.message
        assert site.get_job(failing) is not None

        # what cannot cross a shard is refused, naming both
        with pytest.raises(CrossShard, match=f"{a}.*qb.*{b}"):
            site.clients[a].queue("qb").put(f"{JOBS}:noop")
        with pytest.raises(CrossShard, match="one shard"):
            site.put_many(
                [site.queue("qa").spec(f"{JOBS}:noop"), site.queue("qb").spec(f"{JOBS}:noop")]
            )
        with pytest.raises(CrossShard, match=f"depend on job {jids[0]} of shard '{a}'"):
            site.queue("qc").put(f"{JOBS}:noop", depends=[jids[0]])

        # domain limits are set in every namespace
        site.set_domain_limit("example.com", 5)
        assert all("example.com" in site.clients[ns].scheduling.domain_limits() for ns in (a, b, c))

        master.send(signal.SIGTERM)
        assert master.wait(30) == 0
    finally:
        master.close()
        site.close()
