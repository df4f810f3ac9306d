"""What a stretch of work costs, counted over a window that an adapter opens and
closes around it (the drain from its first job to its last, or a run of puts):

* Redis CPU: `INFO cpu` used_cpu_sys + used_cpu_user of the server (the whole
  process: main thread, I/O and bio threads, the AOF fsync included).
* Redis commands: `INFO commandstats` deltas, by command, less the window's own
  (its INFO and the GETs of the counter's poll); `script` calls are FCALL,
  FCALL_RO, EVAL, EVAL_RO, EVALSHA and EVALSHA_RO.
* Script time: the commandstats usec deltas of the script commands (time inside
  them, their own commands included; no I/O). Commands a script runs are counted
  in commandstats as well, as Redis counts them: `commands` is every command the
  server ran, sent by a client or by a script.
* Worker-tree CPU: utime + stime + cutime + cstime from /proc/<pid>/stat of every
  descendant of the adapter process (its workers and all they forked; a process
  that exits inside the window is counted in its parent's cutime/cstime once
  reaped), in clock ticks (10 ms).
* With a profile (BENCH_SLOWLOG=1, the harness sets slowlog-log-slower-than 0):
  every command the server ran, from SLOWLOG, read in chunks (GET and RESET in
  one MULTI, so nothing falls between them) by a thread every 0.2 s; by label
  (an FCALL's function without its digest, an EVALSHA's sha and first ARGV word,
  else the command; a command a script ran is marked `(in scripts)`, its time is
  part of the script's), calls and time inside the command. Not used for the other
  numbers: logging every command costs the server time of its own.

Needs only the standard library and redis-py (4.2 on), like common.py. Its own
connections are named METER, so its commands are left out of the slowlog.
"""

from __future__ import annotations

import os
import re
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

METER = "bench-meter"
SLOWLOG_ENV = "BENCH_SLOWLOG"
SCRIPTS = ("fcall", "fcall_ro", "eval", "eval_ro", "evalsha", "evalsha_ro")
CHUNK_S = 0.2  # how often the profile reads the slowlog
SLOWLOG_READ = 1_000_000  # at most this many entries a read (the harness's max-len)
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_DIGEST = re.compile(r"_[0-9a-f]{8,}$")
_WORD = re.compile(r"^[A-Za-z_]{1,24}$")


def meter(url: str) -> redis.Redis:
    """A connection of the meter's own, named so the profile can leave it out."""
    return redis.Redis.from_url(url, client_name=METER)


def tree_cpu_s(root: int) -> float:
    """CPU seconds of every descendant of `root` (not root itself), reaped children
    of theirs included."""
    total = 0.0
    for pid in _descendants(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited since listed: its parent counts it once reaped
        total += sum(int(x) for x in fields[11:15]) * _TICK_S
    return total


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            kids = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except FileNotFoundError:
            continue
        for kid in map(int, kids):
            out += [kid, *_descendants(kid)]
    return out


def _redis_cpu_s(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def commandstats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) by command, as `INFO commandstats` names them (`client|setname`)."""
    out = {}
    for key, value in r.info("commandstats").items():
        if isinstance(value, dict):
            out[key.removeprefix("cmdstat_")] = (int(value["calls"]), int(value["usec"]))
    return out


class Window:
    """Counts from open to close; `close(jobs, polls)` gives the costs per job."""

    def __init__(self, url: str) -> None:
        """Snapshots in the reverse order of close's, the slowest first: the caller
        reads its count of jobs right after, close right after reading it again."""
        self.r = meter(url)
        self.tree_s = tree_cpu_s(os.getpid())
        self.cpu_s = _redis_cpu_s(self.r)
        self.stats = commandstats(self.r)  # the last command the window counts at open
        self.profile = Profile(url) if os.environ.get(SLOWLOG_ENV) else None

    def close(self, jobs: int, polls: int = 0) -> dict[str, Any]:
        """Per job (or put): Redis CPU, commands, script calls, script time and
        worker-tree CPU; `polls`: GETs the caller sent inside the window."""
        profile = self.profile.close(jobs) if self.profile is not None else None
        stats = commandstats(self.r)  # the first command the window counts at close
        cpu_s = _redis_cpu_s(self.r)
        tree_s = tree_cpu_s(os.getpid())
        own = {"info": 1, "get": polls}  # the open's commandstats INFO and the polls
        calls, script_us = {}, 0
        for name, (n, us) in stats.items():
            was_n, was_us = self.stats.get(name, (0, 0))
            if n - was_n - own.get(name, 0) > 0:
                calls[name] = n - was_n - own.get(name, 0)
            if name in SCRIPTS:
                script_us += us - was_us
        out: dict[str, Any] = {"jobs": jobs}
        if jobs > 0:
            scripts = sum(calls.get(name, 0) for name in SCRIPTS)
            out.update(
                redis_cpu_us=(cpu_s - self.cpu_s) / jobs * 1e6,
                commands=sum(calls.values()) / jobs,
                script_calls=scripts / jobs,
                tree_cpu_us=(tree_s - self.tree_s) / jobs * 1e6,
                by_command={name: n / jobs for name, n in sorted(calls.items())},
            )
            if scripts:
                out["script_us"] = script_us / jobs
        if profile is not None:
            out["profile"] = profile
        return out


class Profile:
    """Every command of the window from the slowlog, read by a thread in chunks."""

    def __init__(self, url: str) -> None:
        self.r = meter(url)
        self.r.ping()  # connected before the read that opens the window
        self.by_label: dict[str, list[int]] = {}  # label: [calls, usec]
        self.lost = 0
        self.last_id = self._reset()  # what came before the window: dropped unread
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(CHUNK_S):
            self._read()

    def _reset(self) -> int | None:
        """Empties the slowlog; the id of its newest entry (None: it was empty)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.slowlog_get(1)
        pipe.slowlog_reset()
        newest, _ = pipe.execute()
        return int(newest[0]["id"]) if newest else None

    def _read(self) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.slowlog_get(SLOWLOG_READ)
        pipe.slowlog_reset()
        entries, _ = pipe.execute()
        skip = 1  # the id of this read's own SLOWLOG GET, which its RESET dropped
        for entry in sorted(entries, key=lambda e: int(e["id"])):
            if self.last_id is not None and int(entry["id"]) > self.last_id + 1:
                self.lost += int(entry["id"]) - self.last_id - 1 - skip
            skip, self.last_id = 0, int(entry["id"])
            if _text(entry.get("client_name", b"")) == METER:
                continue
            name = label(_text(entry["command"]).split(" "))
            if _text(entry.get("client_address", b"")).startswith("?"):
                name = f"(in scripts) {name}"  # run by a script: in the script's time
            row = self.by_label.setdefault(name, [0, 0])
            row[0] += 1
            row[1] += int(entry["duration"])

    def close(self, jobs: int) -> dict[str, Any]:
        """Per job: calls and time of each label; `lost`: entries the reads missed
        (none unless a chunk outgrew slowlog-max-len)."""
        self.stop.set()
        self.thread.join()
        self._read()
        per = max(jobs, 1)
        rows = {
            name: {"calls_per_job": calls / per, "us_per_call": us / calls, "us_per_job": us / per}
            for name, (calls, us) in self.by_label.items()
        }
        return {"by_label": rows, "lost": self.lost}


def label(argv: list[str]) -> str:
    """A slowlog entry's name: `FCALL pop` (the digest dropped), `EVALSHA 1a2b3c4d
    fetch` (the sha's head, then the first ARGV if it is a word: Dramatiq's
    dispatch script takes its operation there), else the command."""
    command = argv[0].upper()
    if command in ("FCALL", "FCALL_RO") and len(argv) > 1:
        return f"{command} {_DIGEST.sub('', argv[1])}"
    if command in ("EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO") and len(argv) > 2:
        body = argv[1] if command.startswith("EVAL_") or command == "EVAL" else ""
        head = f"#{zlib.crc32(body.encode()):08x}" if body else argv[1][:8]
        try:
            first = argv[3 + int(argv[2])]
        except (ValueError, IndexError):
            first = ""
        return f"{command} {head}" + (f" {first}" if _WORD.match(first) else "")
    return command


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def timed_puts(url: str, n: int, put: Callable[[], object]) -> dict[str, Any]:
    """Puts n jobs one call each: the first warms up (connection, scripts loaded),
    the other n - 1 are timed and counted."""
    put()
    window = Window(url)
    started = time.perf_counter()
    for _ in range(n - 1):
        put()
    rate = (n - 1) / (time.perf_counter() - started)
    cost = window.close(n - 1)
    cost.pop("tree_cpu_us", None)  # the putting process is the adapter itself
    return {"rate": rate, **cost}
