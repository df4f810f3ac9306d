"""A child's sandbox, built right after fork in a fixed order of small steps:
oom score, workdir, rlimits, groups, gid, uid, capabilities, no-new-privileges,
parent-death signal. Each step succeeds or raises SandboxError(step, cause).

Also here: what a child does around each job (its CPU budget, empty the
workdir, kill any process the job left behind), what it must not inherit (file
descriptors, secrets in the environment), and finding a process's children.
"""

from __future__ import annotations

import contextlib
import grp
import math
import os
import pwd
import re
import resource
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from runtime.config import CHILD_MARKER
from runtime.errors import SandboxError
from runtime.sandbox.prctl import (
    CAP_SYS_RESOURCE,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    drop_capability,
    prctl,
)

T = TypeVar("T")
MIB = 1024 * 1024
# Environment variables a child must not see, unless the worker names them (--env):
# these names, names containing these words, and values holding a password.
SECRET_NAMES = frozenset({"REDIS_URL", "SENTRY_DSN", "RUNTIME_CONFIG", "MYSQL_PWD"})
SECRET_WORDS = (
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "SECRET",
    "TOKEN",
    "CREDENTIAL",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "DSN",
)
# a URL's user:password@ or :password@ (any scheme, also among several URLs in one value)
URL_PASSWORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]*:[^/?#@\s]*@")
# password=..., token=... as a URL's query or a key-value DSN ("host=db password=x")
KEYWORD_SECRET_RE = re.compile(
    r"(?:^|[?&;,\s])(?:password|passwd|pwd|pass|secret|token|access_token|auth_token"
    r"|api_key|apikey|client_secret|sig|signature)=[^&;,\s]",
    re.IGNORECASE,
)
OOM_SCORE_ADJ_ABOVE_MASTER = 500  # children are the OOM killer's first choice, not the master
OOM_SCORE_ADJ_MAX = 1000
CPU_GRACE_S = 1  # from SIGXCPU at the soft CPU limit to SIGKILL at the hard one
LEFTOVER_WAIT_S = 2.0  # how long processes a job left behind may take to die once killed
# a workdir's ctime this old tells every change after it (the filesystem's stamps are
# at least as fine as this; a stamp of the same tick as a change could hide it)
STAMP_TRUSTED_AFTER_NS = 2_000_000_000


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
    oom_score_adj: int | None = None  # None: keep the inherited one


def _step(name: str, action: Callable[[], T]) -> T:
    try:
        return action()
    except SandboxError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise SandboxError(name, err) from err


def identity(user: str | None, group: str | None) -> tuple[int | None, int | None, str | None]:
    """(uid, gid, user name) to switch to; None where nothing changes. KeyError
    when the user (a name, or a number without a passwd entry) or the group name
    is unknown."""
    uid = gid = None
    name = None
    if user is not None:
        entry = pwd.getpwnam(user) if not user.isdigit() else pwd.getpwuid(int(user))
        uid, gid, name = entry.pw_uid, entry.pw_gid, entry.pw_name
    if group is not None:
        gid = grp.getgrnam(group).gr_gid if not group.isdigit() else int(group)
    return uid, gid, name


def oom_score_adj_for_children(master_pid: int) -> int:
    """The master's oom_score_adj (ours if it cannot be read) raised by
    OOM_SCORE_ADJ_ABOVE_MASTER, at most OOM_SCORE_ADJ_MAX."""
    try:
        base = _read_oom_score_adj(f"/proc/{master_pid}/oom_score_adj")
    except (OSError, ValueError):
        base = _read_oom_score_adj("/proc/self/oom_score_adj")
    return min(OOM_SCORE_ADJ_MAX, base + OOM_SCORE_ADJ_ABOVE_MASTER)


def _read_oom_score_adj(path: str) -> int:
    with open(path, "rb") as fh:
        return int(fh.read())


def _oom_score(wanted: int) -> None:
    """Raising our own score needs no privilege; if it cannot be lowered to
    `wanted` (set lower meanwhile), a score already at least that high will do."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write(str(wanted))
    except PermissionError:
        if _read_oom_score_adj("/proc/self/oom_score_adj") < wanted:
            raise


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
    """Builds the sandbox in the calling (freshly forked, single-threaded) process."""
    wanted_oom = spec.oom_score_adj
    if wanted_oom is not None:  # before the uid changes: /proc/self is then root's
        _step("oom-score", lambda: _oom_score(wanted_oom))
    uid, gid, name = _step("identity", lambda: identity(spec.user, spec.group))
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
    # no job may raise a hard limit (CPU, memory, files, processes), even as root
    _step("capabilities", lambda: drop_capability(CAP_SYS_RESOURCE))
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


def kill_leftovers(wait_s: float = LEFTOVER_WAIT_S) -> int:
    """Kills every process the job left behind (our descendants); returns how many.
    Each round kills our children and waits until they are dead: their own children
    are ours from then (we are a subreaper) and go in the next round. Without the
    wait a daemon whose parent was still dying would be missed."""
    if not has_children():
        return 0
    me, killed = os.getpid(), 0
    deadline = time.monotonic() + wait_s
    while kids := children_of(me):
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        for pid in kids:
            _wait_dead(pid, deadline)
        if time.monotonic() >= deadline:
            break
    _reap()
    return killed


def _wait_dead(pid: int, deadline: float) -> None:
    """Reaps our child `pid`, waiting for it to die until `deadline`."""
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() >= deadline:
            return
        time.sleep(0.001)


def children_of(parent: int) -> list[int]:
    """The child processes of `parent` (zombies too): from /proc/<pid>/task/*/children
    (cheap), else a /proc scan."""
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


def empty_if_changed(workdir: Path, seen_ns: int | None) -> int | None:
    """Empties `workdir` (as `empty`) unless its status-change time is still
    `seen_ns`: nothing was added, removed or renamed in it since (ctime, unlike
    mtime, cannot be set back by a job). Returns the time to pass next time, or
    None while it is too recent to tell a later change apart (the kernel stamps
    with a coarse clock, some filesystems to the second: a change in the same
    tick leaves the stamp as it was). One stat when nothing changed instead of
    a scan of the directory (five system calls)."""
    if seen_ns is not None:
        try:
            if os.stat(workdir).st_ctime_ns == seen_ns:
                return seen_ns
        except OSError:
            pass
    empty(workdir)
    try:
        ctime_ns = os.stat(workdir).st_ctime_ns
    except OSError:
        return None
    return ctime_ns if time.time_ns() - ctime_ns > STAMP_TRUSTED_AFTER_NS else None


def clean_environment(env: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a worker's children: `env` without Redis URLs, DSNs,
    passwords, tokens and the like (what `looks_secret`), except the variables
    named in `keep` (`--env`), whatever they look like; plus RUNTIME_CHILD=1
    (config.CHILD_MARKER), so code in a job knows it holds no Redis connection."""
    kept = frozenset(keep)
    clean = {k: v for k, v in env.items() if k in kept or not looks_secret(k, v)}
    clean[CHILD_MARKER] = "1"
    return clean


def looks_secret(name: str, value: str) -> bool:
    """Whether a variable may hold a credential: by its name (REDIS_URL, *TOKEN*,
    *PASSWORD* ...) or its value (a URL with a password, `password=...`)."""
    upper = name.upper()
    if upper in SECRET_NAMES or any(word in upper for word in SECRET_WORDS):
        return True
    return bool(URL_PASSWORD_RE.search(value) or KEYWORD_SECRET_RE.search(value))


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
    """RLIMIT_CPU counts a process's whole life: the soft limit goes to the CPU used
    so far plus `seconds`, rounded up to a whole second (SIGXCPU there), the hard
    one CPU_GRACE_S later (SIGKILL there, for a job that ignores SIGXCPU or raised
    its soft limit). Without CAP_SYS_RESOURCE (dropped by the sandbox) neither
    the job nor the child can raise the hard limit again, so a child runs one job
    under a CPU limit (WorkerSettings makes max_jobs_per_child 1); if it ever ran
    a second, that job would get what is left of the first one's budget."""
    soft_now, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if seconds is None:
        if soft_now != hard:
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        return
    soft = math.ceil(cpu_seconds_used() + seconds)
    new_hard = soft + CPU_GRACE_S
    if hard != resource.RLIM_INFINITY:
        new_hard = min(new_hard, hard)
        soft = min(soft, new_hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, new_hard))


def cpu_seconds_of(pid: int) -> float | None:
    """CPU seconds a process (also a zombie not yet reaped) has used itself, its
    children not counted; None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # state ppid ... utime(11) stime(12)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_hard_limit_of(pid: int) -> int | None:
    """The hard RLIMIT_CPU of a process (also a zombie not yet reaped, and one of
    another user: /proc/<pid>/limits is readable by all), in seconds; None when
    unlimited or unknown."""
    try:
        with open(f"/proc/{pid}/limits", "rb") as fh:
            for line in fh:
                if line.startswith(b"Max cpu time "):
                    hard = line.split()[4]
                    return None if hard == b"unlimited" else int(hard)
    except (OSError, ValueError, IndexError):
        pass
    return None
