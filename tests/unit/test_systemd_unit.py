"""The systemd unit: the directives the worker host relies on, and a clean
`systemd-analyze verify`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "runtime-worker@.service"
ENV = UNIT.with_name("runtime-worker.env.example")


def directives() -> dict[str, str]:
    found = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found[key] = value
    return found


def test_the_unit_has_what_the_master_relies_on() -> None:
    d = directives()
    expected = {
        "Type": "notify", "KillMode": "mixed", "OOMPolicy": "continue", "Restart": "on-failure",
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
    }  # fmt: skip
    assert {k: d.get(k) for k in expected} == expected
    assert int(d["WatchdogSec"]) > 0
    assert "/var/lib/runtime" in d["ReadWritePaths"]
    assert d["ExecStart"].startswith("/usr/local/bin/runtime worker "), "no shell wrapper"


def test_the_stop_timeout_is_above_the_grace_period() -> None:
    grace = next(
        float(line.split("=", 1)[1]) for line in ENV.read_text().splitlines()
        if line.startswith("RUNTIME_GRACE=")
    )  # fmt: skip
    assert int(directives()["TimeoutStopSec"]) >= grace + 5


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    runtime_exe = Path(sys.executable).with_name("runtime")
    unit = tmp_path / "runtime-worker@emails.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/runtime", str(runtime_exe)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "runtime-worker@emails.service" not in done.stderr, done.stderr
