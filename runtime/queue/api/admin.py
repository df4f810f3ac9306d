"""The operator's side of a client (`client.admin`): a queue's jobs by state, page by
page, and the running jobs' progress; failed jobs by page, back to their queues or
deleted in bulk; the masters and domains at work; statistics, throughput and one
read of everything a metrics scrape shows; forgetting an empty queue; retention;
the shared settings. The command line, the dashboard and the metrics read here.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from runtime import config
from runtime.errors import BadArgument, DependedOn
from runtime.queue import ops, stats, wire
from runtime.queue.connection import Connection
from runtime.queue.job import Job
from runtime.queue.stats import QueueStats, Throughput
from runtime.vocabulary import FailureGroup, JobState

CORRUPT_GROUP = FailureGroup.CORRUPT_JOB  # its jobs cannot run again (their data is lost)


class Admin:
    """Operating reads and bulk actions over a client's connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # --- jobs and queues ------------------------------------------------------------

    def jobs(
        self, queue: str, state: str, start: int = 0, count: int = 25, oldest_first: bool = False
    ) -> tuple[int, list[Job]]:
        """(how many jobs of `queue` are in `state`, a page of them), newest first
        unless `oldest_first`. States: waiting, throttled, scheduled, running, depends,
        complete, failed (lua/jobs.lua says how each is ordered)."""
        if state not in ops.LISTED_STATES:
            raise BadArgument(f"state must be one of {', '.join(ops.LISTED_STATES)}, got {state!r}")
        if start < 0 or not 0 <= count <= config.LIMITS["get_max"]:
            raise BadArgument(f"start must be >= 0 and count in [0, {config.LIMITS['get_max']}]")
        return self.conn.call(ops.jobs(wire.check_queue(queue), state, start, count, oldest_first))

    def peek(self, queue: str, count: int = 10) -> list[Job]:
        """The jobs a pop of `queue` would take next, without leasing them."""
        return self.conn.call(ops.peek(wire.check_queue(queue), count))

    def progressing(self, *queues: str, count: int = 10) -> list[Job]:
        """Running jobs that told their progress (job.progress), the latest told
        first, at most `count` per queue (all known queues when none are named)."""
        names = [wire.check_queue(q) for q in queues] or self.conn.call(
            ops.members(self.conn.keys.key("queues"))
        )
        if not names:
            return []
        keys = [self.conn.keys.key("progressing", queue=q) for q in names]
        pages = self.conn.calls([ops.members(k, 0, count - 1, newest_first=True) for k in keys])
        jids = [jid for page in pages for jid in page]
        found = [j for j in self.conn.call(ops.get(jids)) if j] if jids else []
        running = [j for j in found if j.state == JobState.RUNNING and j.progress is not None]
        return sorted(running, key=lambda j: -int((j.progress or {}).get("at_ms") or 0))

    def queue_known(self, queue: str) -> bool:
        """Whether the queue was ever used (put, paused ...) and not forgotten since."""
        return self.conn.call(ops.queue_known(self.conn.keys, wire.check_queue(queue)))

    def queue_forget(self, queue: str) -> bool:
        """Forgets an empty queue (WrongState, saying what it holds, if it is not): it
        leaves the list of queues with its totals, statistics and pause. False if it
        was not known."""
        return self.conn.call(ops.queue_forget(wire.check_queue(queue)))

    def trim_retention(self, batch: int | None = None) -> int:
        """Deletes completed jobs past retention (jobs-history, jobs-history-count), at
        most `batch` (default and most: retention_batch); returns how many. Pops and
        completions do this as they go; this runs while Redis is full, where they
        are refused."""
        most = config.LIMITS["retention_batch"]
        if batch is not None and not 1 <= batch <= most:
            raise BadArgument(f"batch must be in [1, {most}], got {batch!r}")
        return self.conn.call(ops.retention(most if batch is None else batch))

    # --- failures -------------------------------------------------------------------

    def failed_jobs(self, group: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """(how many failed in `group`, a page of them, newest first)."""
        return self.conn.call(ops.failed_jobs(group, start, count))

    def unfail_own(self, group: str, count: int | None = None) -> int:
        """Moves up to `count` (default: all) failed jobs of `group` back to their own
        queues, oldest first, at most unfail_max per call; returns how many moved."""
        if group == CORRUPT_GROUP:
            raise BadArgument(f"jobs failed as {CORRUPT_GROUP} cannot run again (data lost)")
        left = count if count is not None else self.conn.call(ops.failed_groups()).get(group, 0)
        moved = 0
        while left > 0:
            batch = min(left, config.LIMITS["unfail_max"])
            moved += self.conn.call(ops.unfail(group, "", batch))
            left -= batch
        return moved

    def unfail_all(self, group: str | None = None) -> int:
        """Moves every failed job (of `group`, else of every group but
        runtime.CorruptJob, whose data is lost) back to its own queue; returns how
        many moved. Jobs that fail meanwhile may be moved too."""
        if group is not None:
            return self.unfail_own(group)
        groups = sorted(self.conn.call(ops.failed_groups()).keys())
        return sum(self.unfail_own(name) for name in groups if name != CORRUPT_GROUP)

    def delete_failed(self, group: str, batch: int = 1000) -> int:
        """Deletes every failed job of `group`, oldest first, `batch` per call; returns
        how many. A job others still wait on stays (cancel refuses it: DependedOn)."""
        key = self.conn.keys.key("failed", group=group)
        deleted, kept = 0, 0
        while jids := self.conn.call(ops.list_range(key, -(kept + batch), -(kept + 1))):
            try:
                deleted += len(self.conn.call(ops.cancel(jids)))
            except DependedOn:
                for jid in jids:
                    try:
                        deleted += len(self.conn.call(ops.cancel([jid])))
                    except DependedOn:
                        kept += 1
        return deleted

    # --- masters, domains, statistics ---------------------------------------------------

    def workers(self) -> dict[str, dict[str, Any]]:
        """{worker: what the master told of itself, its jobs and when it was seen}."""
        return self.conn.call(ops.workers())

    def domains(self, count: int = 1000) -> dict[str, dict[str, Any]]:
        """{domain: {"limit": {"rate", "period", "burst"} or None (the default applies),
        "throttled": jobs throttled now, "next_start_ms": when it may start one (None:
        now)}} for domains with a limit of their own or a budget spent now (at most
        `count` of each)."""
        return self.conn.call(ops.domains(count))

    def live_output(
        self, jid: str, after: str = "0-0", count: int = 100
    ) -> tuple[str, list[tuple[str, int]]]:
        """What a running job printed, as its master sent it (batched, a few times a
        second): batches after entry `after` ("0-0": from the first kept), as
        (text, lines dropped), and the id to read on from. docs/operating.md,
        "runtime logs"."""
        return self.conn.call(ops.live_read(self.conn.keys, jid, after, count))

    def live_tail(self, jid: str, batches: int = 50) -> str:
        """The end of what a running job printed: its last `batches` live batches."""
        return self.conn.call(ops.live_tail(self.conn.keys, jid, batches))

    def stats(self, queue: str, day: date | None = None) -> QueueStats:
        """Wait and run times, failures, failed and retries of a queue on a UTC day."""
        day = day or stats.today()
        return self.conn.call(ops.queue_stats(self.conn.keys, wire.check_queue(queue), day))

    def throughput(self, minutes: int = 60) -> Throughput:
        """Jobs completed and failed for good in each of the last `minutes` minutes
        (the current one included, at most throughput_hours x 60), all queues
        together, as the reports counted them: the same on every host."""
        most = config.LIMITS["throughput_hours"] * 60
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= most:
            raise BadArgument(f"minutes must be a whole number in [1, {most}], got {minutes!r}")
        return self.conn.call(ops.throughput(minutes))

    def server_info(self) -> dict[str, str]:
        """The Redis server's INFO (default sections): version, uptime, memory ..."""
        return self.conn.call(ops.server_info())

    def snapshot(self, up_s: float = 60.0) -> dict[str, Any]:
        """Everything a metrics scrape shows, read in one call: {"now_ms", "queues":
        {queue: counts + "stats": today's fields}, "groups": {group: n}, "workers":
        {worker: {"seen_ms", "running"}} (those seen within `up_s`)}."""
        return self.conn.call(ops.metrics(round(up_s * 1000)))

    # --- shared settings ------------------------------------------------------------------

    def config_get(self) -> dict[str, float]:
        """Every shared setting: the defaults, overlaid with what is set in Redis."""
        values = {name: s.default for name, s in config.SHARED.items()}
        for name, raw in self.conn.call(ops.hash_of(self.conn.keys.key("config"))).items():
            values[name] = float(raw)
        return values

    def config_set(self, name: str, value: str | float) -> float:
        parsed = config.shared_setting(name).parse(value)
        self.conn.call(ops.set_setting(self.conn.keys, name, repr(parsed)))
        return parsed

    def config_unset(self, name: str) -> None:
        config.shared_setting(name)
        self.conn.call(ops.unset_setting(self.conn.keys, name))
