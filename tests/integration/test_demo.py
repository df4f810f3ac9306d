"""The README's main command: `runtime demo` runs the sample jobs with a real worker;
run again, it shows that run's jobs (the summary line and the table agree)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path


def demo_row(stdout: str) -> list[str]:
    """The demo queue's row of the status table the demo prints."""
    [row] = [line.split() for line in stdout.splitlines() if line.startswith("demo ")]
    return row


def test_the_demo_runs_its_jobs_on_the_embedded_redis_again_and_again() -> None:
    state = Path(f"/tmp/rt-demo-{uuid.uuid4().hex[:8]}")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RUNTIME_NAMESPACE")}
    env["RUNTIME_STATE_DIR"] = str(state)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "runtime", "demo"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        rows = {
            line.split()[1]: line.split()
            for line in done.stdout.splitlines()
            if line[:32].isalnum() and len(line.split()) >= 5
        }
        assert rows["add"][2] == "complete" and rows["flaky"][2:4] == ["complete", "2"]
        assert rows["broken"][2] == "failed" and "ValueError" in " ".join(rows["broken"])
        assert rows["look_up"][2:4] == ["failed", "1"], "Fail spends no retry"
        assert '-> {"sum": 6, "count": 3}' in " ".join(rows["add"]), "results are shown"
        assert done.stdout.rstrip().endswith("4 complete, 2 failed")
        assert demo_row(done.stdout) == ["demo", "0", "0", "0", "0", "0", "0", "4", "2", "0"]
        assert "Traceback" not in done.stderr
        again = subprocess.run(
            [sys.executable, "-m", "runtime", "demo"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.rstrip().endswith("4 complete, 2 failed")
        assert demo_row(again.stdout) == ["demo", "0", "0", "0", "0", "0", "0", "4", "2", "0"], (
            "the table agrees with the summary line"
        )
        assert again.stdout.startswith("deleted 6 jobs an earlier demo left on queue 'demo'\n")
    finally:
        pid = state / "redis.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)
