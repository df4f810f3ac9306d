"""A child's sandbox, built right after fork in a fixed order of small steps:
workdir, rlimits, groups, gid, uid, no-new-privileges, parent-death signal.
Each step succeeds or raises SandboxError(step, cause).

Also here: what a child does around each job (empty the workdir, kill any
process the job left behind) and what it must not inherit (file descriptors,
secrets in the environment).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import resource
import shutil
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from runtime.errors import SandboxError
from runtime.sandbox.prctl import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    prctl,
)

T = TypeVar("T")
MIB = 1024 * 1024
# Environment variables a child must not see (names, and names containing these words).
SECRET_NAMES = frozenset({"REDIS_URL", "SENTRY_DSN", "RUNTIME_CONFIG"})
SECRET_WORDS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "API_KEY", "DSN")


@dataclass(frozen=True)
class Limits:
    """Resource limits of a child; None leaves the inherited limit."""

    address_space_mib: int | None = None
    open_files: int | None = None
    processes: int | None = None


@dataclass(frozen=True)
class Spec:
    workdir: Path
    limits: Limits = Limits()
    user: str | None = None
    group: str | None = None


def _step(name: str, action: Callable[[], T]) -> T:
    try:
        return action()
    except SandboxError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise SandboxError(name, err) from err


def _ids(spec: Spec) -> tuple[int | None, int | None, str | None]:
    """(uid, gid, user name) to switch to; None where nothing changes."""
    uid = gid = None
    name = None
    if spec.user is not None:
        entry = pwd.getpwnam(spec.user) if not spec.user.isdigit() else pwd.getpwuid(int(spec.user))
        uid, gid, name = entry.pw_uid, entry.pw_gid, entry.pw_name
    if spec.group is not None:
        gid = grp.getgrnam(spec.group).gr_gid if not spec.group.isdigit() else int(spec.group)
    return uid, gid, name


def _workdir(spec: Spec, uid: int | None, gid: int | None) -> None:
    spec.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if uid is not None or gid is not None:
        os.chown(spec.workdir, -1 if uid is None else uid, -1 if gid is None else gid)
    os.chdir(spec.workdir)


def _rlimits(limits: Limits) -> None:
    def cap(kind: int, value: int | None) -> None:
        if value is not None:
            resource.setrlimit(kind, (value, value))

    cap(
        resource.RLIMIT_AS,
        None if limits.address_space_mib is None else limits.address_space_mib * MIB,
    )
    cap(resource.RLIMIT_NOFILE, limits.open_files)
    cap(resource.RLIMIT_NPROC, limits.processes)


def _parent_death_signal(parent_pid: int) -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def enter(spec: Spec, parent_pid: int) -> None:
    """Builds the sandbox in the calling (freshly forked) process."""
    uid, gid, name = _step("identity", lambda: _ids(spec))
    _step("workdir", lambda: _workdir(spec, uid, gid))
    _step("rlimits", lambda: _rlimits(spec.limits))
    if uid is not None and name is not None:
        _step("groups", lambda: os.initgroups(name, gid if gid is not None else os.getgid()))
    elif gid is not None:
        _step("groups", lambda: os.setgroups([]))
    if gid is not None:
        _step("gid", lambda: os.setgid(gid))
    if uid is not None:
        _step("uid", lambda: os.setuid(uid))
    _step("no-new-privileges", lambda: prctl(PR_SET_NO_NEW_PRIVS, 1))
    _step("parent-death-signal", lambda: _parent_death_signal(parent_pid))


def become_subreaper() -> None:
    """Orphans of the job's processes (daemons) become ours, so we can end them."""
    _step("subreaper", lambda: prctl(PR_SET_CHILD_SUBREAPER, 1))


def has_children() -> bool:
    """Whether this process has any child, live or not yet reaped: one syscall (we are
    a subreaper, so daemons a job left behind are our children too)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def kill_leftovers(max_rounds: int = 50) -> int:
    """Kills every process the job left behind (our descendants); returns how many."""
    if not has_children():
        return 0
    me, killed = os.getpid(), 0
    for _ in range(max_rounds):
        kids = _children_of(me)
        if not kids:
            break
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        _reap()
    _reap()
    return killed


def _children_of(parent: int) -> list[int]:
    """Our child processes: from /proc/<pid>/task/*/children (cheap), else a /proc scan."""
    try:
        kids: list[int] = []
        for task in os.listdir(f"/proc/{parent}/task"):
            with open(f"/proc/{parent}/task/{task}/children", "rb") as fh:
                kids += [int(pid) for pid in fh.read().split()]
        return kids
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
        return _scan_children_of(parent)


def _scan_children_of(parent: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            # pid (comm) state ppid ...; comm may hold spaces and parentheses
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 1 and int(fields[1]) == parent:
                kids.append(int(entry))
    return kids


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def empty(workdir: Path, *, create: bool = True) -> None:
    """Removes everything the job left in its workdir (made if missing and `create`)."""
    try:
        entries = list(os.scandir(workdir))
    except FileNotFoundError:
        if create:
            workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def clean_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment without Redis URLs, DSNs, passwords, tokens and the like."""
    return {
        k: v
        for k, v in env.items()
        if k not in SECRET_NAMES and not any(word in k.upper() for word in SECRET_WORDS)
    }


def keep_only_fds(keep: set[int]) -> None:
    """Closes every file descriptor but `keep` (stdin, stdout, stderr and the pipe)."""
    for fd in _open_fds():
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _open_fds() -> list[int]:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def cpu_seconds_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def limit_cpu_for_next_job(seconds: float | None) -> None:
    """RLIMIT_CPU counts a process's whole life: move the soft limit to now + seconds."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if seconds is None:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        return
    soft = int(cpu_seconds_used() + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
