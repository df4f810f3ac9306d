"""Every default of runtime, and the one loader for settings.

Two kinds of settings live here:

* `Settings`: how this process reaches Redis (URL, namespace, state directory),
  how much it logs, and which environment variables its jobs may see.
  Loaded once by `load_settings` from, in rising precedence: built-in defaults,
  a TOML file (`RUNTIME_CONFIG`, or `runtime.toml` in the working directory),
  environment variables, then explicit overrides (the CLI's flags).
* `SHARED`: the deployment's settings kept in Redis (`runtime config`), read by
  the scripts. Their defaults are rendered into the Lua library, so a default
  is written once, here. Queue-level overrides are named `<queue>-<name>`.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError

DEFAULT_NAMESPACE = "runtime"
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
QUEUE_NAME_RE = re.compile(r"^[^\s{}:]{1,128}$")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
COMMAND_LOG_LEVEL = "WARNING"  # a command's, unless set (a worker logs at INFO at least)
WORKER_LOG_LEVEL = "INFO"
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CHILD_MARKER = "RUNTIME_CHILD"  # "1" in a worker's children: code there holds no Redis


def version() -> str:
    """The installed package's version ("0+unknown" in a source tree never installed)."""
    try:
        return metadata.version("runtime-worker")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def log_level(name: str) -> str:
    """A log level's name, upper case ("warn" is WARNING); ConfigError if unknown."""
    upper = str(name).strip().upper()
    upper = "WARNING" if upper == "WARN" else upper
    if upper not in LOG_LEVELS:
        raise ConfigError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {name!r}")
    return upper


def env_names(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Environment variable names from "A,B" or a list; ConfigError for a bad one."""
    items = value.replace(",", " ").split() if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"env must be a list of variable names, got {value!r}")
    for item in items:
        if not isinstance(item, str) or not ENV_NAME_RE.match(item):
            raise ConfigError(f"env: {item!r} is not an environment variable name")
    return tuple(dict.fromkeys(items))


def default_state_dir() -> Path:
    """`$RUNTIME_STATE_DIR`, else `$XDG_STATE_HOME/runtime`, else `~/.local/state/runtime`."""
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "runtime"


@dataclass(frozen=True)
class Settings:
    """How a process reaches the deployment's Redis."""

    url: str | None = None  # None: the embedded default Redis
    namespace: str = DEFAULT_NAMESPACE
    state_dir: Path = field(default_factory=default_state_dir)
    sentry_dsn: str | None = None
    log_level: str | None = None  # None: WARNING for commands, INFO for a worker
    env: tuple[str, ...] = ()  # variables jobs see even when they look secret
    shards: str = ""  # a sharded site's queue -> namespace rule (runtime.queue.shards)

    def __post_init__(self) -> None:
        if self.log_level is not None:
            object.__setattr__(self, "log_level", log_level(self.log_level))
        object.__setattr__(self, "env", env_names(self.env))
        if not NAMESPACE_RE.match(self.namespace):
            raise ConfigError(
                f"namespace {self.namespace!r} must be 1-64 characters of letters, "
                "digits, '_', '.' or '-'"
            )


_ENV = {
    "url": "REDIS_URL",
    "namespace": "RUNTIME_NAMESPACE",
    "state_dir": "RUNTIME_STATE_DIR",
    "sentry_dsn": "SENTRY_DSN",
    "log_level": "RUNTIME_LOG_LEVEL",
    "env": "RUNTIME_ENV",
    "shards": "RUNTIME_SHARDS",
}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text: byte {err.start} is invalid"
        ) from None
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply to decode") from None
    section = doc.get("runtime", {})
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [runtime] must be a table")
    unknown = set(section) - set(_ENV)
    if unknown:
        raise ConfigError(f"config file {path}: unknown keys {sorted(unknown)}")
    return section


def load_settings(
    overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Defaults, then the TOML file, then the environment, then `overrides`."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    toml_path = env.get("RUNTIME_CONFIG")
    if toml_path:
        values.update(_read_toml(Path(toml_path)))
    elif Path("runtime.toml").is_file():
        values.update(_read_toml(Path("runtime.toml")))
    for name, var in _ENV.items():
        if env.get(var):
            values[name] = env[var]
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    if "state_dir" in values:
        values["state_dir"] = Path(values["state_dir"]).expanduser()
    return replace(Settings(), **values)


MIN_CHILD_PROCESSES = 2  # RLIMIT_NPROC counts threads: a child has two
ORDERS = ("ordered", "round-robin")


@dataclass(frozen=True)
class WorkerSettings:
    """How one master runs: what it serves, how many children, their limits."""

    modules: tuple[str, ...]
    queues: tuple[str, ...]
    concurrency: int = field(default_factory=lambda: os.cpu_count() or 1)
    order: str = "ordered"
    prefetch: int | None = None  # jobs leased ahead of the children (None: ~10 ms of work)
    pipeline: int = 2  # most jobs a busy child holds behind its running one (short jobs)
    max_jobs_per_child: int | None = None  # 1 whenever cpu_limit_s is set (see below)
    max_memory_per_child_mib: int | None = None  # recycle a child above this RSS
    memory_limit_mib: int | None = None  # kill a job's child above this RSS
    cpu_limit_s: float | None = None  # CPU seconds per job (RLIMIT_CPU)
    address_space_mib: int | None = None  # RLIMIT_AS of children
    open_files: int | None = None  # RLIMIT_NOFILE of children
    max_processes: int | None = None  # RLIMIT_NPROC of children (per user; threads count)
    user: str | None = None
    group: str | None = None
    grace_s: float = 30.0  # TERM: how long running jobs may finish
    kill_grace_s: float = 5.0  # between SIGTERM and SIGKILL of a child
    sandbox_dir: Path | None = None  # default: <state_dir>/sandboxes
    allow_eviction: bool = False  # start on a Redis whose maxmemory-policy evicts keys
    allow_no_aof: bool = False  # no warning when Redis keeps no append-only file
    env: tuple[str, ...] = ()  # variables children see even when they look secret
    log_level: str = WORKER_LOG_LEVEL  # the worker's; children's logging follows it
    otel: bool = False  # each attempt in a span (also on when OTEL_* names an exporter)
    otel_file: Path | None = None  # also write each span as a JSON line here

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_level", log_level(self.log_level))
        object.__setattr__(self, "env", env_names(self.env))
        if self.cpu_limit_s is not None and self.max_jobs_per_child != 1:
            # RLIMIT_CPU counts a child's whole life and its hard limit, once set,
            # cannot be raised again: every job gets a fresh child, a fresh budget
            object.__setattr__(self, "max_jobs_per_child", 1)
        if not self.modules:
            raise ConfigError("name at least one MODULE: the jobs' modules, the allow-list")
        if not self.queues:
            raise ConfigError("name at least one queue (--queues a,b)")
        for queue in self.queues:
            if not QUEUE_NAME_RE.match(queue):
                raise ConfigError(f"bad queue name {queue!r}")
        if self.order not in ORDERS:
            raise ConfigError(f"order must be one of {', '.join(ORDERS)}")
        if self.concurrency < 0 or (self.prefetch is not None and self.prefetch < 0):
            raise ConfigError("concurrency and prefetch must be >= 0")
        if self.pipeline < 0:
            raise ConfigError("pipeline must be >= 0")
        for name in ("grace_s", "kill_grace_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.max_processes is not None and self.max_processes < MIN_CHILD_PROCESSES:
            raise ConfigError(
                f"max-processes must be at least {MIN_CHILD_PROCESSES}: it counts threads, "
                "and a child runs two (the job's and its reader)"
            )


# --- settings shared by the deployment, stored in Redis -------------------------


@dataclass(frozen=True)
class SharedSetting:
    """One deployment-wide setting kept in Redis; `per_queue` allows `<queue>-<name>`;
    `integer` for counts and sizes, which take whole numbers only."""

    name: str
    default: float
    minimum: float
    maximum: float
    per_queue: bool
    help: str
    integer: bool = False

    def parse(self, raw: str | float) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.name} must be a number, got {raw!r}") from None
        if math.isnan(value) or not self.minimum <= value <= self.maximum:
            raise ConfigError(
                f"{self.name} must be between {self.minimum:g} and {self.maximum:g}, got {raw!r}"
            )
        if self.integer and not value.is_integer():
            raise ConfigError(f"{self.name} must be a whole number, got {raw!r}")
        return value


SHARED: dict[str, SharedSetting] = {
    s.name: s
    for s in (
        SharedSetting(
            "heartbeat",
            60,
            0.5,
            86400,
            True,
            "lease length in seconds; masters renew every third of it",
        ),
        SharedSetting(
            "timeout",
            3600,
            0.001,
            30 * 86400,
            True,
            "seconds a job may run without calling job.heartbeat() before it is killed",
        ),
        SharedSetting(
            "size-warning",
            0,
            0,
            1e12,
            True,
            "masters log a warning when a queue holds more jobs than this (0: never)",
            integer=True,
        ),
        SharedSetting(
            "size-warning-every",
            60,
            1,
            86400,
            False,
            "seconds between two size warnings about one queue from one master",
        ),
        SharedSetting(
            "jobs-history",
            7 * 86400,
            0,
            10 * 365 * 86400,
            False,
            "seconds a completed job is kept",
        ),
        SharedSetting(
            "jobs-history-count",
            50_000,
            0,
            1e9,
            False,
            "most completed jobs kept",
            integer=True,
        ),
        SharedSetting(
            "max-data-bytes",
            1 << 20,
            2,
            64 << 20,
            False,
            "largest job data accepted, in bytes of JSON",
            integer=True,
        ),
        SharedSetting(
            "compact-records",
            -1,
            -1,
            1,
            False,
            "queued jobs stored compact: 1 always, 0 never, -1 (unset) when every "
            "registered master reads them (README, Upgrading)",
            integer=True,
        ),
        SharedSetting(
            "result-max-bytes",
            1 << 20,
            0,
            64 << 20,
            False,
            "largest job result stored, in bytes of JSON (a larger one is not kept)",
            integer=True,
        ),
        SharedSetting(
            "backoff-min",
            1,
            0,
            86400 * 30,
            True,
            "smallest retry delay in seconds (exponential backoff with jitter)",
        ),
        SharedSetting(
            "backoff-max",
            3600,
            0,
            86400 * 30,
            True,
            "largest retry delay in seconds",
        ),
        SharedSetting(
            "fair",
            0,
            0,
            1,
            True,
            "1: pops take the queue's ready domains in rotation, not oldest job first",
            integer=True,
        ),
        SharedSetting(
            "domain-rate",
            0,
            0,
            1e9,
            False,
            "default rate limit of a domain without its own, starts per period (0: none)",
        ),
        SharedSetting(
            "domain-period",
            1,
            0.001,
            86400 * 365,
            False,
            "period of the default domain limit, seconds",
        ),
        SharedSetting(
            "domain-burst",
            0,
            0,
            1e9,
            False,
            "extra starts the default domain limit allows at once",
            integer=True,
        ),
    )
}


def shared_setting(name: str) -> SharedSetting:
    """The setting `name` or `<queue>-<name>`; ConfigError if it is unknown."""
    if name in SHARED:
        return SHARED[name]
    for base, setting in SHARED.items():
        suffix = "-" + base
        if setting.per_queue and name.endswith(suffix):
            queue = name[: -len(suffix)]
            if QUEUE_NAME_RE.match(queue):
                return setting
    known = ", ".join(sorted(SHARED))
    raise ConfigError(f"unknown setting {name!r} (known: {known}; per queue: <queue>-heartbeat)")


# Limits on arguments and on the work of one script call. The scripts check
# them (they are rendered into the Lua library as LIMITS); the client checks the
# ones a caller can get wrong before anything is sent.
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
DEFAULT_RETRIES = 5
LIMITS: dict[str, int] = {
    "priority_min": PRIORITY_MIN,
    "priority_max": PRIORITY_MAX,
    "default_retries": DEFAULT_RETRIES,
    "names_max": 4096,  # (queue, klass) pairs a compact record may name by number
    "retries_max": 10_000,
    "jid_max": 128,
    "worker_max": 200,
    "group_max": 256,
    "tag_max": 128,
    "tags_max": 64,
    "depends_max": 100,
    "domain_max": 255,
    "concurrency_max": 1_000_000,  # a domain's cap on jobs holding a lease at once
    "delay_max_ms": 10 * 365 * 86400 * 1000,
    "message_max_bytes": 64 * 1024,  # failure messages and tracebacks keep their tail
    "history_max": 100,  # a job's history keeps its first event and the newest ones
    "recent_records_bytes": 4 * 1024 * 1024,  # records a server's scripts remember (x2)
    "recent_records_max": 512,  # ... and at most this many records (x2): job.lua
    "recent_record_max_bytes": 16 * 1024,  # larger records are not remembered
    "pop_max": 1000,
    "ahead_max_us": 100_000,  # how far before its turn a pop may lease a job (it waits)
    "handoff_lease_ms": 1000,  # first lease of a job handed to an idle master (renewed at once)
    "handoff_round_trips": 4,  # ... or this many of the master's stated round trips, if longer
    "handoff_lease_max_ms": 10_000,  # ... but never longer than this (handoff.lua)
    "idle_rtt_max_ms": 60_000,  # the largest round trip a waiting master may state (pop.lua)
    "handoff_max": 16,  # jobs one call hands to idle masters, per queue
    "idle_fresh_ms": 21_000,  # a registration is trusted this long (twice IDLE_WAIT_S, and 1 s)
    "pop_skips": 32,  # lanes over their limit one pop may set aside (then it asks again)
    "promote_batch": 1000,
    "reclaim_batch": 100,
    "release_batch": 100,
    "due_recheck_ms": 1000,  # a pop scans its queues' timed sets at least this often (due.lua)
    "prune_batch": 10,
    "retention_batch": 100,  # completed jobs one complete call may delete
    "retention_pop_batch": 10,  # completed jobs one pop may delete (when none complete)
    "cancel_max": 10_000,
    "tombstone_bytes": 512,  # room a cancelled job's tombstone is given (Redis memory, bytes)
    "get_max": 1000,
    "counts_max": 10_000,
    "peek_max": 1000,
    "unfail_max": 10_000,
    "workers_max": 10_000,
    "stats_days": 30,  # how long a day's statistics are kept
    "throughput_hours": 24,  # how long the jobs completed and failed per minute are kept
    "graph_max": 10_000,  # jobs a cycle check may walk
    "recur_batch": 100,  # recurrences one pop spawns for, per queue
    "recur_catch_up": 1000,  # missed ticks one pop may spawn per recurrence
    "recur_low": 16,  # cron ticks left when clients are asked for more
    "recur_ticks_max": 256,  # cron ticks stored at once
    "recur_id_max": 64,
    "data_depth_max": 100,  # job data nested deeper is refused at put, corrupt when stored
    "drop_batch": 100,  # corrupt or stray index entries one call may drop (then it asks again)
    "corrupt_kept_bytes": 4096,  # bytes of a corrupt record kept (escaped) in its failure
    "outage_max_ms": 7 * 86400 * 1000,  # longest outage a master may report (resumed)
    "output_max_bytes": 64 * 1024,  # an attempt's output kept with its job (its tail)
    "note_max_bytes": 1024,  # a note in a job's history (its head)
    "progress_message_max_bytes": 1024,  # a progress message (its head)
    "live_max_bytes": 64 * 1024,  # one batch of a running job's live output (its tail)
    "live_entries": 1000,  # batches a job's live stream keeps (about: MAXLEN ~)
    "live_ttl_s": 3600,  # a live stream lives this long after its last batch
    "puts_max": 1000,  # jobs one completion may put
    "put_jids_kept": 10,  # jids of the jobs it put that a job's history keeps per event
    "wait_max_ms": 3600 * 1000,  # longest one registration of client.wait
    "waiters_max": 100,  # wake-up tokens one job's end pushes (one per waiter)
    "wait_linger_ms": 5000,  # a wake-up list outlives its last waiter's wait by this
}
