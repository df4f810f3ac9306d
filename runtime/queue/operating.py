"""The operator's side of `Client`: a queue's jobs by state, page by page; forgetting
an empty queue; failed jobs back to their queues, or deleted, in bulk; domains with
their throttled jobs; what masters tell of themselves; one read of everything a
metrics scrape shows. `Operating` is a base of `Client` (through `Scheduling`); use
it through `Client`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runtime import config
from runtime.errors import BadArgument, DependedOn
from runtime.queue import ops, wire
from runtime.queue.connection import Connection
from runtime.vocabulary import FailureGroup

if TYPE_CHECKING:
    from runtime.queue.client import Client
    from runtime.queue.job import Job
    from runtime.queue.stats import Throughput

CORRUPT_GROUP = FailureGroup.CORRUPT_JOB  # its jobs cannot run again (their data is lost)


class Operating(Connection):
    if TYPE_CHECKING:  # Client has them

        def failed(self) -> dict[str, int]: ...
        def unfail(self, group: str, queue: str | None, count: int = 25) -> int: ...
        def cancel(self, *jids: str) -> list[str]: ...

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
        owner: Client | None = self  # type: ignore[assignment]  # a Client, through Scheduling
        return self.call(
            ops.jobs(wire.check_queue(queue), state, start, count, oldest_first, owner)
        )

    def queue_known(self, queue: str) -> bool:
        """Whether the queue was ever used (put, paused ...) and not forgotten since."""
        return self.call(ops.queue_known(self.keys, wire.check_queue(queue)))

    def queue_forget(self, queue: str) -> bool:
        """Forgets an empty queue (WrongState, saying what it holds, if it is not): it
        leaves the list of queues with its totals, statistics and pause. False if it
        was not known."""
        return self.call(ops.queue_forget(wire.check_queue(queue)))

    def trim_retention(self, batch: int | None = None) -> int:
        """Deletes completed jobs past retention (jobs-history, jobs-history-count), at
        most `batch` (default and most: retention_batch); returns how many. Pops and
        completions do this as they go; this runs while Redis is full, where they
        are refused."""
        most = config.LIMITS["retention_batch"]
        if batch is not None and not 1 <= batch <= most:
            raise BadArgument(f"batch must be in [1, {most}], got {batch!r}")
        return self.call(ops.retention(most if batch is None else batch))

    def unfail_own(self, group: str, count: int | None = None) -> int:
        """Moves up to `count` (default: all) failed jobs of `group` back to their own
        queues, oldest first, at most unfail_max per call; returns how many moved."""
        if group == CORRUPT_GROUP:
            raise BadArgument(f"jobs failed as {CORRUPT_GROUP} cannot run again (data lost)")
        left = count if count is not None else self.failed().get(group, 0)
        moved = 0
        while left > 0:
            batch = min(left, config.LIMITS["unfail_max"])
            moved += self.unfail(group, None, batch)
            left -= batch
        return moved

    def unfail_all(self, group: str | None = None) -> int:
        """Moves every failed job (of `group`, else of every group but
        runtime.CorruptJob, whose data is lost) back to its own queue; returns how
        many moved. Jobs that fail meanwhile may be moved too."""
        if group is not None:
            return self.unfail_own(group)
        return sum(self.unfail_own(name) for name in sorted(self.failed()) if name != CORRUPT_GROUP)

    def delete_failed(self, group: str, batch: int = 1000) -> int:
        """Deletes every failed job of `group`, oldest first, `batch` per call; returns
        how many. A job others still wait on stays (cancel refuses it: DependedOn)."""
        key = self.keys.key("failed", group=group)
        deleted, kept = 0, 0
        while jids := self.call(ops.list_range(key, -(kept + batch), -(kept + 1))):
            try:
                deleted += len(self.cancel(*jids))
            except DependedOn:
                for jid in jids:
                    try:
                        deleted += len(self.cancel(jid))
                    except DependedOn:
                        kept += 1
        return deleted

    def domains(self, count: int = 1000) -> dict[str, dict[str, Any]]:
        """{domain: {"limit": {"rate", "period", "burst"} or None (the default applies),
        "throttled": jobs throttled now, "next_start_ms": when it may start one (None:
        now)}} for domains with a limit of their own or a budget spent now (at most
        `count` of each)."""
        return self.call(ops.domains(count))

    def register_worker(
        self, worker: str, *, host: str, pid: int, queues: Sequence[str], concurrency: int,
        started_ms: int | None = None,
    ) -> None:  # fmt: skip
        """What a master tells of itself (the master sends it; also for tools and tests)."""
        self.call(ops.register_worker(worker, host=host, pid=pid, queues=queues,
                                      concurrency=concurrency, started_ms=started_ms))  # fmt: skip

    def throughput(self, minutes: int = 60) -> Throughput:
        """Jobs completed and failed for good in each of the last `minutes` minutes
        (the current one included, at most throughput_hours x 60), all queues
        together, as the reports counted them: the same on every host."""
        most = config.LIMITS["throughput_hours"] * 60
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= most:
            raise BadArgument(f"minutes must be a whole number in [1, {most}], got {minutes!r}")
        return self.call(ops.throughput(minutes))

    def server_info(self) -> dict[str, str]:
        """The Redis server's INFO (default sections): version, uptime, memory ..."""
        return self.call(ops.server_info())

    def snapshot(self, up_s: float = 60.0) -> dict[str, Any]:
        """Everything a metrics scrape shows, read in one call: {"now_ms", "queues":
        {queue: counts + "stats": today's fields}, "groups": {group: n}, "workers":
        {worker: {"seen_ms", "running"}} (those seen within `up_s`)}."""
        return self.call(ops.metrics(round(up_s * 1000)))
