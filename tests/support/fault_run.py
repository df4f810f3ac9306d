"""A fault run: real masters with jobs running on a private Redis, a ledger of
attempts, and the checks every fault test makes.

Each master `i` serves its own queue `m<i>` first, then the shared queue `q`, so
a test can hand each master a job of its own (long jobs that span the fault, a
fresh job after it). Every job is `tests.integration.jobs:ledger`: each attempt
writes `jid attempt pid start|alive|end time` lines (alive every 20 ms).

The checks, after a fault (see issue 11):

* no master exits;
* each master logs one line per state change: at most MAX_DOWN_LINES lines with
  DOWN per fault, and a master that said DOWN says UP again last;
* leasing resumes: a fresh job per master, put after the fault ended, completes
  within RESUME_S of the end;
* no job is lost (every job ends complete) and attempts never overlap;
* where the fault cannot have let a lease run out, no job starts twice.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from runtime import Client, config
from runtime.errors import Error
from runtime.queue.embedded import ServerProcess
from tests.support import redis_faults
from tests.support.master import MasterProcess
from tests.support.waiting import stays, wait_for

J = "tests.integration.jobs"
LEASE_S = 3.0  # the deployment's heartbeat: leases run out after this
RESUME_S = 6.0  # backoff cap (5 s) + 1 s
DOWN = "Redis unavailable ("
UP = "Redis available again"
MAX_DOWN_LINES = 3
FRESH_PRIORITY = -10
GET_MAX = config.LIMITS["get_max"]


@dataclass
class Run:
    """One attempt as the ledger saw it (times from time.time())."""

    jid: str
    attempt: int
    pid: int
    first: float
    last: float
    ended: bool = False


class Ledger:
    """The attempts written by the `ledger` job to one file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def runs(self) -> list[Run]:
        if not self.path.exists():
            return []
        runs: list[Run] = []
        current: dict[tuple[str, int], Run] = {}  # (jid, pid) -> the open run
        for line in self.path.read_text().splitlines():
            jid, attempt, pid, what, when = line.split()
            t = float(when)
            if what == "start":
                run = Run(jid, int(attempt), int(pid), t, t)
                current[(jid, int(pid))] = run
                runs.append(run)
                continue
            run = current[(jid, int(pid))]
            run.last = max(run.last, t)
            run.ended = run.ended or what == "end"
        return runs

    def by_jid(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for run in self.runs():
            out.setdefault(run.jid, []).append(run)
        return out

    def started(self, jids: list[str]) -> bool:
        seen = self.by_jid()
        return all(jid in seen for jid in jids)

    def assert_no_overlap(self) -> None:
        for jid, runs in self.by_jid().items():
            runs.sort(key=lambda r: r.first)
            for a, b in itertools.pairwise(runs):
                assert a.last < b.first, (
                    f"attempts of {jid} overlap: {a.attempt} (pid {a.pid}, until {a.last:.3f}) "
                    f"and {b.attempt} (pid {b.pid}, from {b.first:.3f})"
                )

    def assert_ran_once(self, jids: list[str]) -> None:
        runs = self.by_jid()
        twice = {
            jid: [(r.attempt, r.pid) for r in runs[jid]]
            for jid in jids
            if len(runs.get(jid, [])) > 1
        }
        assert not twice, f"jobs started more than once (attempt, pid): {twice}"


class FaultRun:
    """Masters on `server` (directly, or through `url`), jobs, and the checks."""

    def __init__(
        self,
        server: ServerProcess,
        workdir: Path,
        namespace: str = "faults",
        url: str | None = None,
    ) -> None:
        self.server = server
        self.workdir = workdir
        self.namespace = namespace
        self.client = Client.from_url(url or server.url, namespace=namespace)
        self.client.admin.config_set("heartbeat", LEASE_S)
        self.conn = redis_faults.connect(server)
        self.ledger = Ledger(workdir / "ledger")
        self.jids: list[str] = []
        self.masters: list[MasterProcess] = []

    # --- masters and jobs -----------------------------------------------------------

    def start_masters(
        self, count: int = 2, children: int = 3, url: str | None = None, *args: str
    ) -> list[MasterProcess]:
        """`count` masters more, each with `children` and the worker options `args`."""
        for i in range(len(self.masters), len(self.masters) + count):
            master = MasterProcess(
                self.server,
                self.namespace,
                self.workdir,
                f"m{i},q",
                "-c",
                str(children),
                *args,
                url=url,
            )
            self.masters.append(master)
            master.start()
        return self.masters

    def put(
        self, queue: str, seconds: float, n: int = 1, priority: int = 0, until: Path | None = None
    ) -> list[str]:
        """`n` ledger jobs of `seconds` each (or each until the file `until` exists)."""
        q = self.client.queue(queue)
        data: dict[str, object] = {"path": str(self.ledger.path), "seconds": seconds}
        if until is not None:
            data["until"] = str(until)
        specs = [q.spec(f"{J}:ledger", data, priority=priority, retries=20) for _ in range(n)]
        jids = self.client.put_many(specs)
        self.jids += jids
        return jids

    def running(self, long_s: float, short_n: int = 12, short_s: float = 0.25) -> list[str]:
        """Two long jobs per master on its own queue, short ones on `q`; returns
        the long ones once they have all started."""
        long = [jid for i in range(len(self.masters)) for jid in self.put(f"m{i}", long_s, 2)]
        self.put("q", short_s, short_n)
        wait_for(lambda: self.ledger.started(long), 15, what="the long jobs to start")
        return long

    # --- checks ---------------------------------------------------------------------

    def alive(self) -> bool:
        return all(m.proc is not None and m.proc.poll() is None for m in self.masters)

    def hold(self, seconds: float, what: str) -> float:
        """A named window (the fault lasts this long): every master stays up.
        Returns time.time() at its end."""
        try:
            stays(self.alive, seconds, interval_s=0.05, what=f"every master up during {what}")
        except AssertionError:
            self.assert_alive()  # says which master, with its log
            raise
        return time.time()

    def assert_alive(self) -> None:
        for master in self.masters:
            assert master.proc is not None
            code = master.proc.poll()
            assert code is None, f"a master exited {code}: {master.log()[-3000:]}"

    def assert_resumes(self, fault_end: float) -> list[str]:
        """A fresh job per master, put now, completes by fault_end + RESUME_S."""
        fresh = [
            jid
            for i in range(len(self.masters))
            for jid in self.put(f"m{i}", 0.0, priority=FRESH_PRIORITY)
        ]
        deadline_s = max(0.5, fault_end + RESUME_S - time.time())
        try:
            what = f"fresh jobs to complete within {RESUME_S} s of the fault's end"
            wait_for(lambda: self._alive_and_complete(fresh), deadline_s, what=what)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.describe(fresh)}") from None
        return fresh

    def describe(self, jids: list[str]) -> str:
        """The jobs' states and holders, and each master's last log lines."""
        lines = []
        with contextlib.suppress(Error, redis.exceptions.RedisError):
            for jid, job in zip(jids, self.client.get_jobs(jids), strict=True):
                where = "lost" if job is None else f"{job.state} worker={job.worker}"
                lines.append(f"job {jid} (queue {job and job.queue}): {where}")
        for master in self.masters:
            tail = "\n  ".join(master.log().splitlines()[-12:])
            lines.append(f"master {master.pid} (queues {master.argv[-3]}):\n  {tail}")
        return "\n".join(lines)

    def assert_state_lines(self, *, must_notice: bool, faults: int = 1) -> None:
        """At most MAX_DOWN_LINES DOWN lines per master and fault; a master that went
        down came back (UP after its last DOWN); with must_notice, some master did."""
        noticed = 0
        for master in self.masters:
            lines = [ln for ln in master.log().splitlines() if DOWN in ln or UP in ln]
            downs = [ln for ln in lines if DOWN in ln]
            most = MAX_DOWN_LINES * faults
            assert len(downs) <= most, f"{len(downs)} lines saying {DOWN!r} (most {most}): {downs}"
            if downs:
                assert UP in lines[-1], f"{master.pid} never said {UP!r} after: {lines}"
                noticed += 1
        if must_notice:
            assert noticed, f"no master logged {DOWN!r} then {UP!r}"

    def assert_no_tracebacks(self, conditions: tuple[str, ...] | None = None) -> None:
        """No master logged a traceback or a task that ended unexpectedly (a fault is
        one line, never a stack); with `conditions`, every DOWN line names one of
        them ("connection": every way a connection dies)."""
        for master in self.masters:
            log = master.log()
            for sign in ("Traceback", "ended unexpectedly"):
                at = log.find(sign)
                assert at < 0, (
                    f"master {master.pid} logged {sign!r}:\n{log[max(0, at - 300) :][:3000]}"
                )
            if conditions is not None:
                downs = [ln for ln in log.splitlines() if DOWN in ln]
                odd = [ln for ln in downs if not any(f"{DOWN}{c})" in ln for c in conditions)]
                assert not odd, f"DOWN lines naming none of {conditions}: {odd}"

    def settle(self, timeout_s: float = 60.0) -> dict[str, str]:
        """Waits until every job put is complete or failed; returns their states."""

        def settled() -> bool:
            self.assert_alive()
            return all(s in ("complete", "failed") for s in self.states().values())

        wait_for(settled, timeout_s, interval_s=0.1, what="every job to complete or fail")
        return self.states()

    def assert_nothing_lost(self, timeout_s: float = 60.0) -> None:
        states = self.settle(timeout_s)
        bad = {jid: s for jid, s in states.items() if s != "complete"}
        assert not bad, f"jobs not complete: {bad}"
        self.ledger.assert_no_overlap()
        ended = {run.jid for run in self.ledger.runs() if run.ended}
        assert ended >= set(self.jids), "every job ran to its end at least once"

    def states(self) -> dict[str, str]:
        try:  # a read takes at most get_max jobs
            jobs = [
                job
                for at in range(0, len(self.jids), GET_MAX)
                for job in self.client.get_jobs(self.jids[at : at + GET_MAX])
            ]
        except (Error, redis.exceptions.RedisError):  # Redis still coming back
            return {jid: "unknown" for jid in self.jids}
        return {
            jid: "lost" if job is None else job.state
            for jid, job in zip(self.jids, jobs, strict=True)
        }

    def _alive_and_complete(self, jids: list[str]) -> bool:
        self.assert_alive()  # an exit is the failure to report, not the wait
        return self._all_complete(jids)

    def _all_complete(self, jids: list[str]) -> bool:
        try:
            jobs = self.client.get_jobs(jids)
        except (Error, redis.exceptions.RedisError):
            return False
        return all(job is not None and job.state == "complete" for job in jobs)

    def close(self) -> None:
        for master in self.masters:
            master.close()
        with contextlib.suppress(redis.exceptions.RedisError):
            self.client.close()
        self.conn.close()
