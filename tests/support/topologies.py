"""Redis topologies started by a test on loopback ports: a primary with replicas
watched by sentinels, and a Redis Cluster of primaries (redis-cli --cluster
create). Every process is a child of the test and is stopped by `close`.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from runtime import Client
from runtime.queue.embedded import ServerProcess
from tests.support.waiting import wait_for

HOST = "127.0.0.1"


def command(conn: redis.Redis, *args: Any) -> Any:
    """One command on a plain client, its reply as redis-py parses it."""
    return conn.execute_command(*args)  # type: ignore[no-untyped-call]


def free_port() -> int:
    """A TCP port on loopback nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def cluster_port() -> int:
    """A loopback port for a cluster node: at most 55535, its bus port (+10000) free too."""
    for _ in range(1000):
        port = random.randint(20000, 55535)
        if _free(port) and _free(port + 10000):
            return port
    raise AssertionError("no free pair of ports for a cluster node")


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def short_dir(name: str) -> Path:
    """A directory with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(f"/tmp/rt-{uuid.uuid4().hex[:8]}-{name}")
    path.mkdir(parents=True)
    return path


class Node:
    """One redis-server on a loopback port (and a unix socket, to probe it)."""

    def __init__(self, binary: str, directory: Path, port: int, extra: str = "") -> None:
        self.port = port
        conf = f"port {port}\nbind {HOST}\nrepl-diskless-sync-delay 0\n{extra}"
        self.process = ServerProcess(binary, directory, appendonly=True, extra=conf)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> Node:
        self.process.start()
        return self

    def conn(self, **options: object) -> redis.Redis:
        return redis.Redis(HOST, self.port, socket_timeout=5, **options)  # type: ignore[arg-type]

    def signal(self, sig: int) -> None:
        assert self.process.process is not None
        self.process.process.send_signal(sig)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.signal(signal.SIGCONT)
        self.process.kill(signal.SIGKILL)


class SentinelProcess:
    """`redis-server sentinel.conf --sentinel` watching one service."""

    def __init__(
        self,
        binary: str,
        directory: Path,
        port: int,
        service: str,
        primary: Node,
        down_after_ms: int,
        failover_timeout_ms: int,
    ) -> None:
        self.binary, self.directory, self.port = binary, directory, port
        directory.mkdir(parents=True, exist_ok=True)
        self.conf = directory / "sentinel.conf"
        self.conf.write_text(
            "\n".join(
                [
                    f"port {port}",
                    f"bind {HOST}",
                    f'dir "{directory}"',
                    f'logfile "{directory / "sentinel.log"}"',
                    f"sentinel monitor {service} {HOST} {primary.port} 2",
                    f"sentinel down-after-milliseconds {service} {down_after_ms}",
                    f"sentinel failover-timeout {service} {failover_timeout_ms}",
                    f"sentinel parallel-syncs {service} 1",
                    "",
                ]
            )
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SentinelProcess:
        self.process = subprocess.Popen([self.binary, str(self.conf), "--sentinel"])
        wait_for(self._answers, 10, what=f"sentinel on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            return bool(self.conn().ping())
        except redis.RedisError:
            return False

    def conn(self) -> redis.Redis:
        return redis.Redis(HOST, self.port, socket_timeout=2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


class SentinelSet:
    """A primary, its replicas, and sentinels watching it as `service`."""

    def __init__(
        self,
        binary: str,
        *,
        replicas: int = 2,
        sentinels: int = 3,
        service: str = "main",
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        extra: str = "",
    ) -> None:
        self.root = short_dir("sentinel")
        self.service = service
        self.nodes: list[Node] = []
        for i in range(1 + replicas):
            more = extra if i == 0 else f"{extra}\nreplicaof {HOST} {self.nodes[0].port}"
            self.nodes.append(Node(binary, self.root / f"n{i}", free_port(), more))
        timing = (service, self.nodes[0], down_after_ms, failover_timeout_ms)
        self.sentinels = [
            SentinelProcess(binary, self.root / f"s{i}", free_port(), *timing)
            for i in range(sentinels)
        ]

    def start(self) -> SentinelSet:
        for node in self.nodes:
            node.start()
        wait_for(self._replicas_online, 20, what="the replicas to sync")
        for sentinel in self.sentinels:
            sentinel.start()
        wait_for(self._sentinels_agree, 20, what="the sentinels to see each other")
        return self

    def url(self, namespace_db: str = "") -> str:
        hosts = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}{namespace_db}"

    def _replicas_online(self) -> bool:
        info = self.nodes[0].conn().info("replication")
        return int(info.get("connected_slaves", 0)) == len(self.nodes) - 1

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            try:
                state: Any = sentinel.conn().sentinel_master(self.service)
            except redis.RedisError:
                return False
            if int(state.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                return False
            if int(state.get("num-slaves", 0)) < len(self.nodes) - 1:
                return False
        return True

    def primary_port(self) -> int:
        """The primary's port as the sentinels say it (the first that answers)."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                found: Any = sentinel.conn().sentinel_get_master_addr_by_name(self.service)
                _, port = found
                return int(port)
        raise AssertionError("no sentinel answers")

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Cluster:
    """`count` primaries (no replicas) made a cluster by redis-cli --cluster create."""

    def __init__(self, binary: str, count: int = 3, node_timeout_ms: int = 2000) -> None:
        self.root = short_dir("cluster")
        extra = (
            f"cluster-enabled yes\ncluster-config-file nodes.conf\n"
            f"cluster-node-timeout {node_timeout_ms}"
        )
        self.nodes = [
            Node(binary, self.root / f"n{i}", cluster_port(), extra) for i in range(count)
        ]
        self.cli = str(Path(binary).with_name("redis-cli"))
        if not Path(self.cli).exists():
            self.cli = shutil.which("redis-cli") or "redis-cli"

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        addresses = [node.address for node in self.nodes]
        subprocess.run(
            [self.cli, "--cluster", "create", *addresses, "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_for(self._ok, 30, interval_s=0.1, what="the cluster to be ok on every node")
        return self

    def _ok(self) -> bool:
        for node in self.nodes:
            info = command(node.conn(), "CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
        return True

    def url(self) -> str:
        return "redis+cluster://" + ",".join(node.address for node in self.nodes)

    def owner(self, slot: int) -> Node:
        """The primary serving `slot` now, as the first node's slot table says."""
        for start, end, primary, *_ in command(self.nodes[0].conn(), "CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(primary[1]))
        raise AssertionError(f"slot {slot} is not served")

    def node_id(self, node: Node) -> str:
        raw = command(node.conn(), "CLUSTER", "MYID")
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def migrate_slot(self, slot: int, to: Node, batch: int = 10, pause_s: float = 0.0) -> int:
        """Moves `slot` to `to` as redis-cli --cluster reshard does: IMPORTING and
        MIGRATING, MIGRATE of the keys `batch` at a time (`pause_s` between
        batches), then SETSLOT NODE on both and the others. Returns the keys moved."""
        source = self.owner(slot)
        assert source is not to, "the slot is already there"
        src, dst = source.conn(), to.conn()
        src_id, dst_id = self.node_id(source), self.node_id(to)
        command(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        moved = 0
        while True:
            keys = command(src, "CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            command(src, "MIGRATE", HOST, to.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            if pause_s:
                time.sleep(pause_s)
        for node in (to, source, *[n for n in self.nodes if n not in (to, source)]):
            command(node.conn(), "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return moved

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def running_cluster() -> Iterator[Cluster]:
    """A 3-node cluster for a test module (skipped without redis-server on PATH)."""
    import pytest  # noqa: PLC0415 - only the fixtures that use it need pytest

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server on PATH")
    running = Cluster(binary).start()
    yield running
    running.close()


def cluster_client(cluster: Cluster) -> Iterator[Client]:
    """A client on the cluster in a namespace of its own, routed to its slot."""
    c = Client.from_url(cluster.url(), namespace="t" + uuid.uuid4().hex[:12])
    c.conn.now_ms()  # the first call follows MOVED: c.redis is the slot's owner from now on
    yield c
    c.close()
