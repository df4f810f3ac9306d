"""Checks a worker makes before its master starts: before "ready", before any
child is forked. Each failure is one typed error with one line a person can act
on; the CLI turns it into an exit code (ConfigError 2, RedisUnavailable 3).

In order:

1. identity: `--user` and `--group` exist on this host, and the master may
   switch to them (root, or CAP_SETUID/CAP_SETGID);
2. Redis answers (and accepts our credentials);
3. Redis keeps what we put in it: an evicting `maxmemory-policy` (anything but
   `noeviction`) refuses the start unless `--allow-eviction` (then a warning);
   `appendonly no` warns unless `--allow-no-aof`. A server that will not say
   (INFO and CONFIG GET refused) is used, with a warning that the checks were
   skipped.
"""

from __future__ import annotations

import logging
import os

from runtime import config
from runtime.errors import ConfigError
from runtime.queue.connection import Connection
from runtime.queue.faults import redact
from runtime.queue.server import ServerFacts, server_facts
from runtime.sandbox import sandbox

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 5.0  # connecting and each reply, at start
CAP_SETGID, CAP_SETUID = 6, 7


def check(settings: config.Settings, worker: config.WorkerSettings, url: str) -> ServerFacts:
    """Raises ConfigError or RedisUnavailable when the worker must not start;
    logs a warning for what is unsafe but allowed. Returns what Redis said."""
    check_identity(worker)
    connection = Connection.from_url(
        url,
        namespace=settings.namespace,
        socket_connect_timeout=CHECK_TIMEOUT_S,
        socket_timeout=CHECK_TIMEOUT_S,
    )
    try:
        facts = server_facts(connection)
    finally:
        connection.close()
    check_server(facts, worker, redact(url))
    if worker.cpu_limit_s is not None:
        log.info(
            "--cpu-limit %g s: every child runs one job, then a fresh child takes over "
            "(a CPU budget cannot be renewed)",
            worker.cpu_limit_s,
        )
    return facts


def check_identity(worker: config.WorkerSettings) -> None:
    """ConfigError when --user or --group is unknown, or cannot be switched to."""
    uid = gid = None
    if worker.user is not None:
        try:
            uid, gid, _ = sandbox.identity(worker.user, None)
        except (KeyError, OverflowError):
            raise ConfigError(f"unknown user {worker.user!r} (--user)") from None
    if worker.group is not None:
        try:
            _, gid, _ = sandbox.identity(None, worker.group)
        except (KeyError, OverflowError):
            raise ConfigError(f"unknown group {worker.group!r} (--group)") from None
    if worker.user is None and worker.group is None:
        return
    needed = [CAP_SETGID] + ([CAP_SETUID] if uid is not None and uid != os.geteuid() else [])
    if os.geteuid() != 0 and not all(_capable(cap) for cap in needed):
        flags = " ".join(
            f"{flag} {value}"
            for flag, value in (("--user", worker.user), ("--group", worker.group))
            if value
        )
        raise ConfigError(
            f"{flags} needs root (the master runs as uid {os.geteuid()}): children could not "
            f"switch to uid {uid if uid is not None else os.geteuid()} gid {gid}"
        )


def _capable(cap: int) -> bool:
    """Whether this process holds `cap` in its effective set."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, ValueError):
        pass
    return False


def check_server(facts: ServerFacts, worker: config.WorkerSettings, where: str) -> None:
    """ConfigError for an evicting Redis (unless allowed); warnings for the rest."""
    if facts.refused is not None:
        log.warning(
            "could not read the settings of Redis at %s (%s): the eviction and "
            "append-only checks were skipped",
            where,
            facts.refused,
        )
        return
    policy = facts.maxmemory_policy
    if facts.evicting:
        if not worker.allow_eviction:
            raise ConfigError(
                f"Redis at {where} evicts keys when full (maxmemory-policy {policy}), "
                "which loses jobs: set maxmemory-policy noeviction, or pass --allow-eviction"
            )
        log.warning(
            "Redis at %s evicts keys when full (maxmemory-policy %s): jobs may be "
            "lost (allowed by --allow-eviction)",
            where,
            policy,
        )
    if facts.appendonly is False and not worker.allow_no_aof:
        log.warning(
            "Redis at %s keeps no append-only file (appendonly no): jobs put or "
            "changed since its last snapshot are lost if it restarts "
            "(--allow-no-aof silences this)",
            where,
        )
