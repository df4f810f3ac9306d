"""Prometheus metrics against a real Redis: the values after a known workload, the
cost of a scrape in Redis commands with 1,000 queues (served and through the
registry, the same text), and `runtime metrics` serving /metrics alone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from runtime import Client
from runtime.metrics import RuntimeCollector, make_registry
from runtime.metrics import scrape as served_scrape
from tests.support import redis_faults
from tests.support.waiting import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples_of(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(client: Client) -> Samples:
    return samples_of(generate_latest(make_registry(client)).decode())


def q(name: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"queue": name, **more}.items()))


def test_a_scrape_after_a_known_workload(plain_client: Client) -> None:
    emails = plain_client.queue("emails")
    for i in range(5):
        emails.put("myapp.jobs:send", {}, jid=f"e{i}", retries=1)
    emails.put("myapp.jobs:send", {}, jid="later", delay=3600)
    plain_client.queue("idle").put("myapp.jobs:send", {}, jid="i0")
    popped = emails.pop(4, worker="box-1")
    popped[0].complete()
    popped[1].complete()
    popped[2].fail("boom.Error", "it broke")
    popped[3].retry("boom.Error", "again", delay=0)
    plain_client.leases.register_worker(
        "box-1", host="box", pid=1, queues=["emails"], concurrency=2
    )
    samples = scrape(plain_client)
    jobs = {
        state: samples[("runtime_jobs", q("emails", state=state))]
        for state in ("waiting", "scheduled", "running", "complete", "failed")
    }
    assert jobs == {"waiting": 2, "scheduled": 1, "running": 0, "complete": 2, "failed": 1}
    assert samples[("runtime_jobs", q("idle", state="waiting"))] == 1
    assert samples[("runtime_jobs_completed_total", q("emails"))] == 2
    assert samples[("runtime_jobs_failed_total", q("emails"))] == 1
    assert samples[("runtime_jobs_retried_total", q("emails"))] == 1
    assert samples[("runtime_failed_jobs", (("group", "boom.Error"),))] == 1
    assert samples[("runtime_workers", ())] == 1
    assert samples[("runtime_worker_running_jobs", (("worker", "box-1"),))] == 0
    assert samples[("runtime_job_run_seconds_count", q("emails"))] == 2
    assert samples[("runtime_job_run_seconds_bucket", q("emails", le="+Inf"))] == 2
    assert samples[("runtime_job_run_seconds_bucket", q("emails", le="60.0"))] == 2
    assert ("runtime_job_run_seconds_count", q("idle")) not in samples, "idle ran nothing today"
    assert samples[("runtime_job_wait_seconds_count", q("emails"))] == 4
    assert samples[("runtime_queue_oldest_waiting_seconds", q("idle"))] >= 0
    assert samples[("runtime_redis_up", ())] == 1
    jids = {"e0", "e1", "e2", "e3", "e4", "later", "i0"}
    assert not any(v in jids for (_, labels) in samples for _, v in labels), "no jid in a label"


def script_calls(client: Client) -> dict[str, int]:
    stats: dict[str, Any] = client.redis.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items()}


def scrape_cost(client: Client, read: Callable[[], object]) -> tuple[int, int]:
    """(calls the scrape sent, commands Redis ran for it, script internals included)."""
    read()  # warm: the library is loaded
    before = script_calls(client)
    read()
    after = script_calls(client)
    delta = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    delta.pop("cmdstat_info", None)
    sent = sum(
        n
        for k, n in delta.items()
        if k in ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_evalsha_ro")
    )
    return sent, sum(delta.values())


@pytest.mark.parametrize("queues", [10, 1000])
def test_a_scrape_is_one_call_however_many_queues(plain_client: Client, queues: int) -> None:
    specs = [plain_client.queue(f"q{i}").spec("a.b:c", {}) for i in range(queues)]
    plain_client.put_many(specs)
    for read in (lambda: scrape(plain_client), lambda: served_scrape(plain_client.admin)):
        sent, ran = scrape_cost(plain_client, read)
        assert sent == 1, "one script call per scrape"
        assert ran < 20 * queues + 50, "inside the script: a few commands per queue"


class Held:
    """One snapshot read from Redis, given to every scrape (a Source)."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.held = snapshot

    def snapshot(self, up_s: float) -> dict[str, Any]:
        return self.held


def test_a_served_scrape_of_1000_queues_is_the_registrys_text(plain_client: Client) -> None:
    queues = [plain_client.queue(f"q{i}") for i in range(1000)]
    plain_client.put_many(queue.spec("a.b:c", {}) for queue in queues for _ in range(3))
    for i, queue in enumerate(queues[1::2]):  # every other: histograms, failure groups
        jobs = queue.pop(3, worker="box-1")
        jobs[0].complete()
        jobs[1].fail(f"boom.Error{i % 7}", "it broke")
    held = Held(plain_client.admin.snapshot())
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(held))
    served, through_registry = served_scrape(held), generate_latest(registry)
    assert samples_of(served.decode())[("runtime_job_run_seconds_count", q("q1"))] == 1
    assert list(text_string_to_metric_families(served.decode())) == list(
        text_string_to_metric_families(through_registry.decode())
    )
    assert served == through_registry


@pytest.fixture
def serving(plain_client: Client) -> Any:
    env = {
        **os.environ,
        "REDIS_URL": plain_client.url,
        "RUNTIME_NAMESPACE": plain_client.keys.namespace,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", "from runtime.cli import main; main()", "metrics", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_runtime_metrics_serves_metrics_alone(serving: Any, plain_client: Client) -> None:
    plain_client.queue("q").put("a.b:c", {})
    line = serving.stderr.readline()
    assert line.startswith("serving metrics on http://127.0.0.1:"), line
    url = line.split()[-1]
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = reply.read().decode()
        assert reply.headers["Content-Type"].startswith("text/plain")
    aging = "runtime_queue_oldest_waiting_seconds"  # grows between the two scrapes
    served, through_registry = samples_of(body), scrape(plain_client)
    assert served[("runtime_jobs", q("q", state="waiting"))] == 1
    assert {k: v for k, v in served.items() if k[0] != aging} == {
        k: v for k, v in through_registry.items() if k[0] != aging
    }, "the same metrics as the registry gives"
    assert served.keys() == through_registry.keys()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url.removesuffix("/metrics") + "/", timeout=10)
    assert missing.value.code == 404
    serving.send_signal(signal.SIGINT)
    assert serving.wait(timeout=30) == 0


def test_runtime_metrics_serves_redis_down_until_redis_answers() -> None:
    with redis_faults.private_server() as server:
        server.kill(signal.SIGKILL)
        server.socket.unlink(missing_ok=True)  # refused until it is up again
        env = {**os.environ, "REDIS_URL": server.url}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from runtime.cli import main; main()",
                "metrics",
                "--port",
                "0",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            warning = proc.stderr.readline()  # type: ignore[union-attr]
            assert "WARNING" in warning and "cannot reach Redis" in warning, warning
            assert warning.endswith("; serving runtime_redis_up 0 until Redis answers\n")
            line = proc.stderr.readline()  # type: ignore[union-attr]
            assert line.startswith("serving metrics on http://127.0.0.1:"), line
            url = line.split()[-1]
            assert redis_up(url) == 0.0
            server.start()
            wait_for(lambda: redis_up(url) == 1.0, 30, what="runtime_redis_up 1")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def redis_up(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return samples_of(reply.read().decode())[("runtime_redis_up", ())]


def test_a_port_in_use_is_a_one_line_error(plain_client: Client) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "REDIS_URL": plain_client.url}
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from runtime.cli import main; main()",
                "metrics",
                "--port",
                str(port),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"runtime: error: cannot listen on 127.0.0.1:{port}")
    assert done.stderr.count("\n") == 1


def test_open_batches_are_counted_until_they_settle(plain_client: Client) -> None:
    assert scrape(plain_client)[("runtime_batches_open", ())] == 0
    b = plain_client.batch()
    b.queue("q").put("myapp.jobs:send", {})
    plain_client.batch().close()  # empty: settled at once
    samples = scrape(plain_client)
    assert samples[("runtime_batches_open", ())] == 1
    assert samples[("runtime_batch_oldest_open_seconds", ())] >= 0
    b.close()
    [lease] = plain_client.queue("q").pop(1, worker="w")
    lease.complete()
    assert scrape(plain_client)[("runtime_batches_open", ())] == 0
