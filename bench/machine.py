"""What machine a benchmark ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as fh:
            kib = int(fh.readline().split()[1])
        return round(kib / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        return 0.0


def _version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except OSError:
        return "missing"
    return out.stdout.strip()


def describe(redis_server: str) -> dict[str, str]:
    return {
        "cpu": f"{_cpu_model()} ({os.cpu_count()} cores)",
        "memory": f"{_mem_gib()} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis-server": _version(redis_server),
        "redis-py": metadata.version("redis"),
        "hiredis": metadata.version("hiredis"),
        "runtime": metadata.version("runtime-worker"),
    }
