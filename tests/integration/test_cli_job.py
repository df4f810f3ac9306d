"""`runtime job JID` (issue 12): result, output tail, progress, what a job waits
on and what waits on it with their states, why it failed; `runtime status`
lists the running jobs that told their progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from runtime import Client
from tests.integration.conftest import Invoke

W = "host-1"


def test_job_shows_result_output_tail_progress_puts_and_notes(
    cli: Invoke,
    plain_client: Client,
) -> None:
    q = plain_client.queue("q")
    q.put("app.jobs:crawl", {"url": "a"}, jid="j1")
    [job] = q.pop(1, worker=W)
    plain_client.leases.progress("j1", W, job.token or "", 3, 4, "page 3")
    output = "".join(f"line {i}\n" for i in range(50))
    kids = [plain_client.queue("links").spec("app.jobs:crawl", jid=f"k{i}") for i in range(2)]
    plain_client.leases.complete(
        "j1", W, job.token or "", result={"links": 2}, output=output, puts=kids
    )
    code, out, _ = cli("job", "j1")
    assert code == 0
    lines = out.splitlines()
    assert 'result     {"links": 2}' in lines
    assert any(line.startswith("progress   3/4 (75%) page 3, at 20") for line in lines)
    at = lines.index("output     last 20 of 50 lines")
    assert lines[at + 1 : at + 21] == [f"  line {i}" for i in range(30, 50)]
    assert any("puts" in line and "count=2 jids=k0,k1" in line for line in lines)
    code, out, _ = cli("job", "k0")
    assert any(line.split()[2:] == ["put", "queue=links", "by=j1"] for line in out.splitlines())
    code, out, _ = cli("job", "j1", "--json")
    shown = json.loads(out)
    assert (shown["result"], shown["output"], shown["progress"]["done"]) == (
        {"links": 2},
        output,
        3,
    )


def test_job_shows_each_dependency_and_dependent_with_its_state(
    cli: Invoke,
    plain_client: Client,
) -> None:
    q = plain_client.queue("q")
    q.put("app:a", {}, jid="a", retries=0)
    q.put("app:x", {}, jid="x", delay=3600)
    q.put("app:b", {}, jid="b", depends=["a", "x"])
    q.put("app:c", {}, jid="c", depends=["b"])
    [a] = q.pop(1, worker=W)
    a.fail("app.errors.Boom", "Traceback\napp.errors.Boom: down")
    code, out, _ = cli("job", "b")
    assert code == 0
    lines = out.splitlines()
    assert "depends    a failed (app.errors.Boom)" in lines
    assert "           x scheduled" in lines
    assert "dependents c failed (runtime.DependencyFailed)" in lines
    assert any(line.startswith("failure    runtime.DependencyFailed at ") for line in lines)
    assert "  job a, which it depends on, failed for good (app.errors.Boom)" in lines
    code, out, _ = cli("job", "b", "--json")
    assert json.loads(out)["related"] == {"a": "failed", "x": "scheduled", "c": "failed"}


def test_status_lists_the_running_jobs_that_told_their_progress(
    cli: Invoke,
    plain_client: Client,
) -> None:
    q = plain_client.queue("q")
    for jid in ("p1", "p2", "quiet"):
        q.put("app:a", {}, jid=jid)
    jobs = {j.jid: j for j in q.pop(3, worker=W)}
    plain_client.leases.progress("p1", W, jobs["p1"].token or "", 1, 10, "first")
    plain_client.leases.progress("p2", W, jobs["p2"].token or "", 5, None, None)
    code, out, _ = cli("status")
    assert code == 0
    lines = out.splitlines()
    at = lines.index("in progress (latest told first)")
    shown = lines[at + 1 :]
    assert len(shown) == 2
    assert {line.split()[0] for line in shown} == {"p1", "p2"}
    assert any(line.split()[:4] == ["p1", "q", "1/10", "(10%)"] for line in shown)
    jobs["p1"].complete()
    jobs["p2"].complete()
    code, out, _ = cli("status")
    assert "in progress" not in out


def watched(client: Client, *args: str, lines: int) -> list[str]:
    """The first `lines` lines `runtime status --watch 0.2 ARGS` prints; then Ctrl-C."""
    env = {**os.environ, "REDIS_URL": client.url, "RUNTIME_NAMESPACE": client.keys.namespace}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "status", "--watch", "0.2", *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        out = [proc.stdout.readline().rstrip("\n") for _ in range(lines)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        return out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_status_json_and_watch_show_the_running_jobs_plain_status_shows(
    cli: Invoke, plain_client: Client
) -> None:
    q = plain_client.queue("q")
    for jid in ("p1", "p2", "quiet"):
        q.put("app:a", {}, jid=jid)
    jobs = {j.jid: j for j in q.pop(3, worker=W)}
    plain_client.leases.progress("p1", W, jobs["p1"].token or "", 1, 10, "first")
    plain_client.leases.progress("p2", W, jobs["p2"].token or "", 5, None, None)
    _, plain, _ = cli("status")
    drawn = plain.splitlines()
    assert "in progress (latest told first)" in drawn
    header, *draw = watched(plain_client, lines=1 + len(drawn))
    assert header.endswith("every 0.2 s, Ctrl-C to stop")
    assert draw == drawn, "a redraw is what plain status prints"
    _, out, _ = cli("status", "--json")
    told = json.loads(out)["q"]["in_progress"]
    assert sorted(
        (
            j["jid"],
            j["klass"],
            j["worker"],
            j["progress"]["done"],
            j["progress"]["total"],
            j["progress"]["message"],
        )
        for j in told
    ) == [("p1", "app:a", W, 1, 10, "first"), ("p2", "app:a", W, 5, None, None)]
    [line] = watched(plain_client, "--json", lines=1)
    assert json.loads(line) == json.loads(out), "a JSON redraw is what --json prints"


def test_job_shows_a_compact_record_as_its_json_twin(cli: Invoke, plain_client: Client) -> None:
    """A namespace holding both forms (compact-records turned on between two
    puts): `runtime job` and `runtime jobs` show them alike."""
    q = plain_client.queue("q")
    q.put("app.jobs:crawl", {"url": "a"}, jid="as-json", priority=3, domain="d.e")
    code, _, _ = cli("config", "compact-records", "1")
    assert code == 0
    q.put("app.jobs:crawl", {"url": "a"}, jid="compact", priority=3, domain="d.e")
    raw = plain_client.redis.hget(plain_client.keys.key("jobs"), "compact")
    assert isinstance(raw, bytes) and raw.startswith(b"w1 2 ")
    shown = {}
    for jid in ("as-json", "compact"):
        code, out, _ = cli("job", jid, "--json")
        assert code == 0
        shown[jid] = json.loads(out)
        shown[jid].pop("jid")
        shown[jid]["history"] = [ev.split(", ", 2)[::2] for ev in shown[jid]["history"]]
        assert shown[jid].pop("put_at_ms") > 0  # the real clock: put one after the other
    assert shown["as-json"] == shown["compact"]
    assert (shown["compact"]["state"], shown["compact"]["priority"]) == ("waiting", 3)
    code, out, _ = cli("jobs", "q")
    assert code == 0 and "as-json" in out and "compact" in out


def test_compact_records_are_refused_while_a_master_of_an_earlier_release_runs(
    cli: Invoke, plain_client: Client
) -> None:
    """A master of an earlier release tells no `records` (its worker_info.lua
    stores what this one stores, without it); `config compact-records 1` names
    it and sets nothing, unless --force."""
    keys = plain_client.keys
    old = {"host": "old", "pid": 7, "concurrency": 1, "queues": ["q"]}
    plain_client.redis.set(keys.key("worker_info", worker="old-7"), json.dumps(old))
    plain_client.redis.zadd(keys.key("workers"), {"old-7": 1})
    plain_client.leases.register_worker("new-8", host="new", pid=8, queues=["q"], concurrency=1)
    code, out, err = cli("config", "compact-records", "1")
    assert code != 0 and "old-7" in err and "new-8" not in err, err
    assert plain_client.admin.config_get()["compact-records"] == -1, "the default: not set"
    plain_client.redis.delete(keys.key("worker_info", worker="old-7"))  # its hour is up
    code, out, _ = cli("config", "compact-records", "1")
    assert (code, out) == (0, "compact-records = 1\n")
    plain_client.redis.set(keys.key("worker_info", worker="old-7"), json.dumps(old))
    assert cli("config", "compact-records", "0")[0] == 0, "turning it off is never refused"
    assert cli("config", "compact-records", "1", "--force")[0] == 0
