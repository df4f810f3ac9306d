"""Jobs that try what a careless or hostile job might: leave processes behind,
lift their CPU limit, and names a klass must not reach (imported, not defined
here). Each records what it saw in files named by its data (absolute paths)."""

from __future__ import annotations

import json
import os
import resource
import signal
import time
from pathlib import Path
from shutil import rmtree  # imported, not defined here: never a klass
from typing import Any

__all__ = ["rmtree"]


def _write(path: str, text: str) -> None:
    """Whole or not at all: the test reads it while the job runs."""
    tmp = f"{path}.tmp"
    Path(tmp).write_text(text)
    os.rename(tmp, path)


def _sleeper() -> None:
    """In a forked process: becomes `sleep 60` (nothing of Python left to run)."""
    try:
        os.execvp("sleep", ["sleep", "60"])
    finally:
        os._exit(127)


def _spawn_grandchild() -> int:
    pid = os.fork()
    if pid == 0:
        _sleeper()
    return pid


def _spawn_daemon() -> int:
    """Double fork and setsid: a daemon in a session of its own, no longer our child."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            _sleeper()
        os._exit(0)
    os.close(w)
    daemon = int(os.read(r, 32))
    os.close(r)
    os.waitpid(middle, 0)
    return daemon


def leave_processes(job: Any) -> None:
    """Starts a grandchild (in the child's process group) and a double-forked
    setsid daemon, each `sleep 60`; writes {"grandchild", "daemon", "child"} to
    data["path"]; waits for the file data["go"] (if given); then does data["then"]:
    "sleep" (default), "hog" (data["mib"] MiB, kept), "ignore_term" (and sleep),
    "exit" (os._exit, no clean-up), "segfault", or "return"."""
    pids = {"grandchild": _spawn_grandchild(), "daemon": _spawn_daemon(), "child": os.getpid()}
    _write(job.data["path"], json.dumps(pids))
    go = job.data.get("go")
    while go and not os.path.exists(go):
        time.sleep(0.01)
    then = job.data.get("then", "sleep")
    if then == "hog":
        block = bytearray(job.data["mib"] * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
    elif then == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif then == "exit":
        os._exit(3)
    elif then == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif then == "return":
        return
    time.sleep(60)


def _try_setrlimit(limits: tuple[int, int]) -> str:
    try:
        resource.setrlimit(resource.RLIMIT_CPU, limits)
    except (ValueError, OSError) as err:
        return type(err).__name__
    return "raised"


def lift_cpu_limit(job: Any) -> None:
    """Records its CPU limits and its tries to lift them (to unlimited; the soft
    one to the hard one), then burns CPU until it is killed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    seen: dict[str, Any] = {"soft": soft, "hard": hard, "used": usage.ru_utime + usage.ru_stime}
    inf = resource.RLIM_INFINITY
    seen["to_unlimited"] = _try_setrlimit((inf, inf))
    seen["hard_up"] = _try_setrlimit((hard, hard + 100))
    seen["soft_to_hard"] = _try_setrlimit((hard, hard))
    seen["now"] = resource.getrlimit(resource.RLIMIT_CPU)
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)  # and ignores the warning
    _write(job.data["path"], json.dumps(seen))
    while True:
        pass


def cpu_limits(job: Any) -> None:
    """Appends 'pid soft hard' to data["path"]."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    with open(job.data["path"], "a") as fh:
        fh.write(f"{os.getpid()} {soft} {hard}\n")


def oom_score(job: Any) -> None:
    """Writes the child's oom_score_adj to data["path"]."""
    _write(job.data["path"], Path("/proc/self/oom_score_adj").read_text().strip())
