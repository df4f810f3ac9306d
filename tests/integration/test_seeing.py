"""Seeing inside a job through a real worker: what each attempt cost (CPU, peak
memory) on the job, in its history and in the metrics (docs/operating.md,
"Reading usage")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from runtime import Client
from runtime.metrics import scrape
from tests.integration.conftest import Invoke, StartMaster
from tests.support.waiting import ended, wait_for

S = "tests.integration.seeing_jobs"
MODULES = (S,)


def test_a_heavy_job_then_a_light_one_on_the_same_child_each_report_their_own_usage(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    q = plain_client.queue("q")
    heavy, light = q.put(f"{S}:heavy", {}), q.put(f"{S}:light", {})
    heavy_job, light_job = ended(plain_client, heavy, 60), ended(plain_client, light, 60)
    assert heavy_job.state == light_job.state == "complete"
    assert heavy_job.usage is not None and light_job.usage is not None
    assert 0.4 <= heavy_job.usage["cpu_s"] <= 1.5, heavy_job.usage
    assert heavy_job.usage["max_rss_mb"] >= 150, heavy_job.usage
    assert "max_rss_of" not in heavy_job.usage, "the kernel here resets the peak"
    assert light_job.usage["cpu_s"] < 0.2, light_job.usage
    assert light_job.usage["max_rss_mb"] < heavy_job.usage["max_rss_mb"] - 100, light_job.usage
    [completed] = [ev for ev in heavy_job.history if ev.event == "completed"]
    assert completed.usage == heavy_job.usage, "the attempt's usage is on its history event"


def test_a_job_whose_subprocess_burns_cpu_counts_it(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    jid = plain_client.queue("q").put(f"{S}:burn_in_subprocess", {})
    job = ended(plain_client, jid, 60)
    assert job.state == "complete" and job.usage is not None
    assert job.usage["cpu_s"] >= 0.4, job.usage


def test_the_usage_histograms_stats_and_job_json_show_each_klass(
    start_master: StartMaster, plain_client: Client, cli: Invoke
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    q = plain_client.queue("q")
    jids = [q.put(f"{S}:heavy", {}), q.put(f"{S}:light", {}), q.put(f"{S}:light", {})]
    for jid in jids:
        ended(plain_client, jid, 60)
    code, out, _ = cli("job", jids[0], "--json")
    shown = json.loads(out)
    assert code == 0 and shown["usage"]["max_rss_mb"] >= 150, shown
    assert "usage={'cpu_s'" in shown["history"][-1], "the history's events, as they print"
    code, out, _ = cli("job", jids[0])
    assert code == 0 and "usage      cpu " in out, out
    code, out, _ = cli("stats", "q")
    assert code == 0, out
    by_cpu = out.split("top klasses by CPU")[1].split("top klasses by memory")
    assert by_cpu[0].index(":heavy") < by_cpu[0].index(":light"), out
    assert by_cpu[1].index(":heavy") < by_cpu[1].index(":light"), out
    text = scrape(plain_client.admin).decode()
    labels = 'klass="{k}",queue="q"'
    heavy, light = labels.format(k=f"{S}:heavy"), labels.format(k=f"{S}:light")
    assert f"runtime_job_cpu_seconds_count{{{heavy}}} 1.0" in text, text
    assert f"runtime_job_cpu_seconds_count{{{light}}} 2.0" in text
    assert f"runtime_job_max_rss_bytes_count{{{heavy}}} 1.0" in text
    bucket = 'klass="' + S + ':heavy",le="{le}",queue="q"'
    assert f"runtime_job_max_rss_bytes_bucket{{{bucket.format(le='134217728.0')}}} 0.0" in text
    assert f"runtime_job_cpu_seconds_bucket{{{bucket.format(le='0.1')}}} 0.0" in text
    assert f"runtime_job_cpu_seconds_bucket{{{bucket.format(le='5.0')}}} 1.0" in text


def test_a_final_failure_keeps_its_usage_on_its_failed_event(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    jid = plain_client.queue("q").put(f"{S}:span_then_fail_once", {}, retries=0)
    job = ended(plain_client, jid, 60)
    assert job.state == "failed" and job.usage is not None
    [failed] = [ev for ev in job.history if ev.event == "failed"]
    assert failed.usage == job.usage


def test_runtime_logs_follow_prints_each_line_as_the_job_runs_and_exits_at_its_end(
    start_master: StartMaster, plain_client: Client
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    jid = plain_client.queue("q").put(f"{S}:tick", {"count": 8, "every_s": 0.3})
    wait_for(lambda: (job := plain_client.get_job(jid)) and job.state == "running", 30)
    env = {**os.environ, "REDIS_URL": plain_client.url,
           "RUNTIME_NAMESPACE": plain_client.keys.namespace}  # fmt: skip
    argv = [sys.executable, "-m", "runtime", "logs", jid, "--follow"]
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
    assert follower.stdout is not None
    late: list[float] = []
    lines = []
    for line in follower.stdout:
        lines.append(line.rstrip("\n"))
        late.append(time.time() - float(line.split(" at ")[1]))
    assert follower.wait(30) == 0
    assert lines[-1].startswith("tick 7 ") and [int(x.split()[1]) for x in lines] == list(
        range(int(lines[0].split()[1]), 8)
    ), lines
    # the lines printed while it was followed came as they were printed (a generous
    # bound: they go in batches every 0.25 s, with the master's next exchange)
    assert max(late[1:]) < 3.0, late


def test_runtime_logs_without_follow_prints_a_running_jobs_lines_so_far(
    start_master: StartMaster, plain_client: Client, cli: Invoke
) -> None:
    start_master("q", "-c", "1", modules=MODULES)
    jid = plain_client.queue("q").put(f"{S}:tick", {"count": 40, "every_s": 0.1})
    wait_for(lambda: plain_client.admin.live_output(jid)[1], 30, what="live output")
    code, out, _ = cli("logs", jid)
    assert code == 0 and out.startswith("tick 0 at "), out
    job = ended(plain_client, jid, 60)
    code, out, _ = cli("logs", jid)
    assert code == 0 and out == job.output and "tick 39 " in out
    assert cli("logs", "nosuch")[0] != 0
