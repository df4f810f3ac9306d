"""Sharded sites (issue 21, part 3): one master process serving the queues of
several namespaces — three namespaces on one plain redis-server (different key
prefixes), and, slow, on a Redis Cluster of three primaries whose slots live on
the three nodes — jobs routed by queue and reported in their own namespaces;
the counts and the dashboard's numbers add up, and what cannot cross a shard is
refused."""

from __future__ import annotations

import functools
import json
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from runtime import config
from runtime.dashboard import reads
from runtime.errors import CrossShard
from runtime.queue import acl
from runtime.queue.api.client import Site
from runtime.queue.embedded import ServerProcess
from tests.support.master import MasterProcess, _children_of
from tests.support.topologies import Cluster, running_cluster
from tests.support.waiting import wait_for

JOBS = "tests.integration.jobs"


def one_master(master: MasterProcess, site: Site) -> None:
    """The worker is one master process (its only child the fork server), and it is
    registered in every namespace of the site, under one worker id, with its pid."""
    server = master.fork_server_pid()
    assert server is not None and _children_of(master.pid) == [server], "one master, no others"
    seen = {ns: client.admin.workers() for ns, client in site.clients.items()}
    assert all(len(workers) == 1 for workers in seen.values()), seen
    assert len({wid for workers in seen.values() for wid in workers}) == 1, "one worker id"
    pids = {info["pid"] for workers in seen.values() for info in workers.values()}
    assert pids == {master.pid}, seen
    assert sum("READY=1" in m for m in master.notifications()) == 1


def test_one_master_serves_three_namespaces_of_one_server(
    default_server: ServerProcess, workdir: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"m{tag}{i}" for i in range(3))
    rule = f"{a}:qa;{b}:qb;{c}:qc,*"
    site = Site(settings=config.Settings(url=default_server.url, namespace=a, shards=rule))
    master = MasterProcess(
        default_server, a, workdir, "qa,qb,qc", "--concurrency", "2", env={"RUNTIME_SHARDS": rule}
    )
    try:
        master.start()
        path = workdir / "ran"
        puts = {"qa": 12, "qb": 8, "qc": 4}
        jids = {
            q: [site.queue(q).put(f"{JOBS}:record", {"path": str(path)}) for _ in range(n)]
            for q, n in puts.items()
        }
        # a job puts into its own shard (goes), or into another (CrossShard, nothing put)
        site.queue("qb").put(f"{JOBS}:put_follow_ups", {"queue": "qb", "count": 2})
        crossing = site.queue("qa").put(
            f"{JOBS}:put_follow_ups", {"queue": "qc", "count": 1}, retries=0
        )
        done = {"qa": 12, "qb": 8 + 1 + 2, "qc": 4}

        def settled() -> bool:
            counts = site.status()
            finished = all(counts.get(q, {}).get("complete") == n for q, n in done.items())
            return finished and sum(site.failed().values()) == 1

        wait_for(settled, 60, what="every job to end")
        one_master(master, site)
        ran = [line.split() for line in path.read_text().splitlines()]
        assert len(ran) == sum(puts.values())
        assert len({pid for *_, pid in ran}) <= 2, "the namespaces share the two children"
        for namespace, queue in ((a, "qa"), (b, "qb"), (c, "qc")):
            client = site.clients[namespace]
            assert client.queues() == [queue], "each queue lives in its own namespace only"
            for jid in jids[queue]:
                job = client.get_job(jid)
                assert job is not None and job.state == "complete", "reported in its namespace"
            others = [site.clients[ns] for ns in (a, b, c) if ns != namespace]
            assert all(o.get_job(jids[queue][0]) is None for o in others)
        crossed = site.clients[a].get_job(crossing)
        assert crossed is not None and crossed.state == "failed"
        assert crossed.failure is not None and crossed.failure.group.endswith("CrossShard")
        assert f"shard '{c}'" in crossed.failure.message

        master.send(signal.SIGTERM)
        assert master.wait(30) == 0
        assert all(not client.admin.workers() for client in site.clients.values()), "gone"
    finally:
        master.close()
        site.close()


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


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text: {'name{labels}': value} of every sample."""
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")
    return {name: float(value) for name, value in samples}


def test_status_metrics_and_the_dashboard_of_a_site_add_up(
    default_server: ServerProcess,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With RUNTIME_SHARDS set, `runtime status`, /metrics and the dashboard show the
    site's numbers, summed over its namespaces; without it, one namespace's."""
    testclient = pytest.importorskip("starlette.testclient", reason="no dashboard extra")
    from runtime import cli as runtime_cli  # noqa: PLC0415
    from runtime.dashboard.app import create_app  # noqa: PLC0415
    from runtime.metrics import exposition, make_registry  # noqa: PLC0415

    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"n{tag}{i}" for i in range(3))
    rule = f"{a}:qa;{b}:qb;{c}:qc,*"
    site = Site(settings=config.Settings(url=default_server.url, namespace=a, shards=rule))
    master = MasterProcess(default_server, a, workdir, "qa,qb,qc", env={"RUNTIME_SHARDS": rule})
    try:
        master.start()
        done = {"qa": 3, "qb": 2, "qc": 1}
        jids = [site.queue(q).put(f"{JOBS}:noop") for q, n in done.items() for _ in range(n)]
        site.queue("qb").put(f"{JOBS}:fail", retries=0)

        def settled() -> bool:
            counts = site.status()
            finished = all(counts.get(q, {}).get("complete") == n for q, n in done.items())
            return finished and counts.get("qb", {}).get("failed") == 1

        wait_for(settled, 60, what="every job to end")
        one_master(master, site)

        monkeypatch.setenv("REDIS_URL", default_server.url)
        monkeypatch.setenv("RUNTIME_NAMESPACE", a)
        monkeypatch.setenv("RUNTIME_SHARDS", rule)
        capsys.readouterr()
        assert runtime_cli.run(["status", "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert {q: shown[q]["complete"] for q in done} == done, "the site's queues, summed"
        assert shown["qb"]["failed"] == 1
        monkeypatch.setenv("RUNTIME_SHARDS", "")
        assert runtime_cli.run(["status", "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert set(alone) == {"qa"}, "without shards: the one namespace, as before"

        metrics = metric_values(exposition(make_registry(site)).decode())
        for queue, n in done.items():
            assert metrics[f'runtime_jobs{{queue="{queue}",state="complete"}}'] == n
            assert metrics[f'runtime_jobs_completed_total{{queue="{queue}"}}'] == n
        assert metrics['runtime_jobs_failed_total{queue="qb"}'] == 1
        assert sum(v for k, v in metrics.items() if k.startswith("runtime_failed_jobs{")) == 1
        assert metrics["runtime_workers"] == 1, "one master in three namespaces is one worker"
        one = metric_values(exposition(make_registry(site.clients[a])).decode())
        assert 'runtime_jobs{queue="qb",state="complete"}' not in one

        app = create_app(site.clients[a], site=site)
        with testclient.TestClient(app, base_url="http://127.0.0.1") as http:
            live = http.get("/live.json", params={"queue": list(done)}).json()["values"]
            assert {q: live[f"q.{q}.complete"] for q in done} == {
                q: str(n) for q, n in done.items()
            }
            scraped = metric_values(http.get("/metrics").text)
            assert all(
                scraped[f'runtime_jobs{{queue="{q}",state="complete"}}'] == n
                for q, n in done.items()
            )
            overview = http.get("/")
            assert overview.status_code == 200 and all(q in overview.text for q in done)
            assert http.get("/queue", params={"name": "qc"}).status_code == 200
            job = http.get("/job", params={"jid": jids[-1]})
            assert job.status_code == 200 and f"No job {jids[-1]}" not in job.text, "found in c"
            workers = http.get("/workers")
            assert workers.status_code == 200 and str(master.pid) in workers.text

        master.send(signal.SIGTERM)
        assert master.wait(30) == 0
    finally:
        master.close()
        site.close()


def test_a_namespace_out_of_reach_stops_its_own_jobs_only(
    default_server: ServerProcess, workdir: Path
) -> None:
    """The master's user loses namespace b's keys (NOPERM for every call there):
    a and c go on, b's jobs wait; b's rights back, they run. The master never stops."""
    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"o{tag}{i}" for i in range(3))
    rule = f"{a}:qa;{b}:qb;{c}:qc,*"
    site = Site(settings=config.Settings(url=default_server.url, namespace=a, shards=rule))
    admin = site.first.redis
    major = int(str(admin.info("server")["redis_version"]).split(".")[0])
    user, password = "u" + tag, "s3cret-" + tag
    rights = [*acl.rules(a, functions=major >= 7), acl.key_pattern(b), acl.key_pattern(c)]
    rights += [acl.channel_pattern(b), acl.channel_pattern(c)]
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", *rights)  # type: ignore[no-untyped-call]
    url = f"unix://{user}:{password}@{default_server.socket}"
    master = MasterProcess(
        default_server, a, workdir, "qa,qb,qc", url=url, env={"RUNTIME_SHARDS": rule}
    )

    def complete(queue: str) -> int:
        return int(site.status().get(queue, {}).get("complete") or 0)

    try:
        master.start()
        for queue in ("qa", "qb", "qc"):
            site.queue(queue).put(f"{JOBS}:noop")
        wait_for(lambda: all(complete(q) == 1 for q in ("qa", "qb", "qc")), 30, what="a start")
        keys = [acl.key_pattern(a), acl.key_pattern(c)]
        admin.execute_command("ACL", "SETUSER", user, "resetkeys", *keys)  # type: ignore[no-untyped-call]
        for i in range(3):
            site.queue("qb").put(f"{JOBS}:noop", {"i": i})
        for i in range(5):
            site.queue("qa").put(f"{JOBS}:noop", {"i": i})
            site.queue("qc").put(f"{JOBS}:noop", {"i": i})
        wait_for(lambda: complete("qa") == 6 and complete("qc") == 6, 30, what="a and c to go on")
        assert complete("qb") == 1, "b's jobs wait for b"
        assert master.proc is not None and master.proc.poll() is None
        assert "Redis unavailable" in master.log() and f"ns={b}" in master.log()
        admin.execute_command("ACL", "SETUSER", user, acl.key_pattern(b))  # type: ignore[no-untyped-call]
        wait_for(lambda: complete("qb") == 4, 30, what="b's jobs once b answers")
        assert complete("qa") == 6 and complete("qc") == 6
        master.send(signal.SIGTERM)
        assert master.wait(30) == 0
    finally:
        master.close()
        admin.acl_deluser(user)
        site.close()


@pytest.mark.slow
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
        one_master(master, site)
        for jid in jids[:3] + jids[-3:]:
            assert site.wait(jid, timeout=5) is None
        for namespace, queue in ((a, "qa"), (b, "qb"), (c, "qc")):
            client = site.clients[namespace]
            assert client.queues() == [queue], "each queue lives in its own namespace only"
            assert cluster.owner(key_slot(client.keys.root.encode())).port == int(
                client.conn.route.url.rsplit(":", 1)[1].split("/")[0]
            )
        assert len({site.clients[ns].conn.route.url for ns in (a, b, c)}) == 3, "three nodes"

        # the site's numbers are the sum of the namespaces' (what each one shows)
        status = site.status()
        assert {q: status[q]["complete"] for q in done} == done
        assert status["qb"]["failed"] == 1 and status["qa"]["failed"] == 1
        rows = [row for ns in (a, b, c) for row in reads.queue_rows(site.clients[ns])]
        assert {row.name: row.counts["complete"] for row in rows} == done
        totals = [reads.totals(site.clients[ns]) for ns in (a, b, c)]
        assert sum(t[0] for t in totals) == sum(done.values())
        assert sum(t[1] for t in totals) == 2
        # ... and what the dashboard of the site shows (RUNTIME_SHARDS set)
        assert {row.name: row.counts["complete"] for row in reads.queue_rows(site)} == done
        assert reads.totals(site) == (sum(done.values()), 2)
        [worker] = reads.worker_rows(site, site.first.conn.now_ms())
        assert worker.pid == master.pid and set(worker.queues) == {"qa", "qb", "qc"}
        snapshot = site.admin.snapshot()
        assert {q: snapshot["queues"][q]["complete"] for q in done} == done
        assert sum(snapshot["groups"].values()) == 2 and len(snapshot["workers"]) == 1
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


def subscribed(redis: Any, channel: str) -> bool:
    return bool(redis.pubsub_numsub(channel)[0][1] == 1)


def test_the_events_of_a_site_come_from_every_namespace(default_server: ServerProcess) -> None:
    """`runtime events` on a sharded site: tracked jobs of both shards."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"e{tag}a", f"e{tag}b"
    settings = config.Settings(url=default_server.url, namespace=a, shards=f"{a}:qa;{b}:qb,*")
    site, listener = Site(settings=settings), Site(settings=settings)
    seen: list[tuple[str, str]] = []

    def listen() -> None:
        for event in listener.scheduling.events(idle_s=10):
            seen.append((event["event"], event["jid"]))
            if len(seen) == 2:
                return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    for client in site.clients.values():
        wait_for(functools.partial(subscribed, client.redis, client.keys.key("events")), 10)
    site.queue("qa").put(f"{JOBS}:noop", {}, jid="in-a", tracked=True)
    site.queue("qb").put(f"{JOBS}:noop", {}, jid="in-b", tracked=True)
    thread.join(20)
    assert sorted(seen) == [("put", "in-a"), ("put", "in-b")]
