"""The systemd unit: the directives the worker host relies on, the install
README.md and docs/running-workers.md describe for it, and a clean
`systemd-analyze verify` of the unit as shipped."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "runtime-worker@.service"
ENV = UNIT.with_name("runtime-worker.env.example")
README = REPO / "README.md"
RUNNING = REPO / "docs" / "running-workers.md"


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
        "Type": "notify",
        "KillMode": "mixed",
        "OOMPolicy": "continue",
        "Restart": "on-failure",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
    }
    assert {k: d.get(k) for k in expected} == expected
    assert int(d["WatchdogSec"]) > 0
    assert "/var/lib/runtime" in d["ReadWritePaths"]
    assert d["ExecStart"].startswith("/usr/bin/env runtime worker "), "no shell wrapper"


def section(page: Path, title: str) -> str:
    """The section of `page` under the heading `title`, up to the next heading."""
    text = page.read_text()
    start = text.index(f"\n{title}\n")
    ends = (text.find(mark, start + len(title) + 2) for mark in ("\n## ", "\n### "))
    return text[start : min((end for end in ends if end > 0), default=len(text))]


def test_the_unit_finds_runtime_in_the_venv_the_readme_installs() -> None:
    d = directives()
    [path] = [
        line for line in UNIT.read_text().splitlines() if line.startswith("Environment=PATH=")
    ]
    venv_bin = path.removeprefix("Environment=PATH=").split(":")[0]
    assert venv_bin == f"{d['WorkingDirectory']}/.venv/bin"
    under_systemd = section(RUNNING, "## Under systemd")
    assert f"cd {d['WorkingDirectory']} && sudo python3 -m venv .venv" in under_systemd
    assert "python3 -m venv .venv" in section(README, "## Install")
    assert UNIT.read_text().count(venv_bin) == 1


def test_the_docs_create_the_user_the_unit_runs_as() -> None:
    d = directives()
    assert (d["User"], d["Group"]) == ("runtime", "runtime")
    under_systemd = section(RUNNING, "## Under systemd")
    assert "sudo useradd --system --user-group " in under_systemd
    assert under_systemd.split("useradd", 1)[1].split("\n")[0].endswith(" runtime")


def test_the_install_section_names_the_dashboard_extra() -> None:
    assert "pip install 'runtime-worker[dashboard]'" in section(README, "## Install")


def test_the_stop_timeout_is_above_the_grace_period() -> None:
    grace = next(
        float(line.split("=", 1)[1])
        for line in ENV.read_text().splitlines()
        if line.startswith("RUNTIME_GRACE=")
    )
    assert int(directives()["TimeoutStopSec"]) >= grace + 5


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_is_clean_on_the_unit_as_shipped(tmp_path: Path) -> None:
    unit = tmp_path / "runtime-worker@emails.service"
    unit.write_bytes(UNIT.read_bytes())  # an instance of the template, byte for byte
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "runtime-worker@emails.service" not in done.stderr, done.stderr


def test_the_unit_s_documentation_is_a_page_pip_installs_in_the_venv() -> None:
    """Documentation= names a docs page under <venv>/share/doc/runtime-worker/,
    where the package's data-files put README.md and docs/*.md (a wheel's
    .data/data/share/doc/...; pip installs it under the venv's prefix)."""
    d = directives()
    venv = f"{d['WorkingDirectory']}/.venv"
    prefix = f"file://{venv}/share/doc/runtime-worker/"
    assert d["Documentation"].startswith(prefix), d["Documentation"]
    page = d["Documentation"].removeprefix(prefix)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = project["tool"]["setuptools"]["data-files"]["share/doc/runtime-worker"]
    files = {p.name for pattern in shipped for p in REPO.glob(pattern)}
    assert page in files and (REPO / "docs" / page).is_file()
    assert {"README.md", "running-workers.md", "operating.md"} <= files
