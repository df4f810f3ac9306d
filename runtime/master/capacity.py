"""How much work the master takes on: whether it leases at all (its `Mode`,
paused), how many children it wants, and how far ahead it leases and pipelines
for the run times seen so far (plan.py's arithmetic, cached). Pure.

The children are shared by every namespace the master serves: their room is one,
and `asking` keeps, by namespace, the jobs its pop out now asked for (a
namespace's pop leaves room for the others only for what the others did not ask
for already: `others_asking`). Kept here once; each Intake reads its own."""

from __future__ import annotations

import logging
import math

from runtime import config
from runtime.master import plan
from runtime.master.held import Mode
from runtime.master.ledger import Ledger
from runtime.master.slots import Slot, Slots

log = logging.getLogger(__name__)

PIPELINING_LOG_EVERY_S = 60.0  # pipelining can flip often under changing load: one line a minute


class Capacity:
    def __init__(
        self,
        worker: config.WorkerSettings,
        worker_id: str,
        slots: Slots,
        ledger: Ledger,
        shards: int = 1,
    ) -> None:
        self.worker, self.worker_id = worker, worker_id
        self.slots, self.ledger = slots, ledger
        self.mode = Mode.RUN
        self.paused = False
        self.target = worker.concurrency  # children wanted
        self.jobs_seen, self.avg_run_s = 0, 0.0
        self.key: tuple[int, int, float] | None = None
        self.cached = (0, 0)
        # `--prefetch 0 --pipeline 0`: (0, 0) whatever the jobs take (plan.py's
        # functions give no more than the options allow), so never worked out again
        self.fixed = worker.prefetch == 0 and worker.pipeline == 0
        self.pipelining = False
        self.pipelining_logged_at, self.pipelining_flips = -math.inf, 0
        self.asking = [0] * shards  # by shard: the jobs its pop out now asked for

    def others_asking(self, shard: int) -> int:
        """The jobs the other namespaces' pops out now asked for."""
        asking = self.asking
        if len(asking) == 1:
            return 0
        return sum(asking) - asking[shard]

    def accepting(self) -> bool:
        return self.mode is Mode.RUN and not self.paused

    def finished(self, took_s: float) -> None:
        """A job ran for `took_s`: the average the plan follows moves."""
        self.avg_run_s = plan.average(self.avg_run_s, self.jobs_seen, took_s)
        self.jobs_seen += 1

    def _capacity(self) -> tuple[int, int]:
        """(pipeline depth, prefetch) for the jobs seen so far: computed again only
        when what they depend on changed (they are asked several times a job, so
        the callers compare the key themselves and call this only on a change)."""
        key = (self.jobs_seen, self.target, self.avg_run_s)
        if key != self.key:
            self.key = key
            self.cached = (
                plan.pipeline_depth(*key, self.worker.pipeline),
                plan.prefetch(*key, self.worker.prefetch),
            )
        return self.cached

    def depth(self, now: float) -> int:
        if self.fixed:
            return 0
        unchanged = self.key == (self.jobs_seen, self.target, self.avg_run_s)
        depth = (self.cached if unchanged else self._capacity())[0]
        if bool(depth) != self.pipelining:
            self.pipelining = bool(depth)
            self.pipelining_flips += 1
            if now - self.pipelining_logged_at >= PIPELINING_LOG_EVERY_S:
                more = self.pipelining_flips - 1
                log.info(
                    "pipelining %s: jobs take %.2f ms on average%s worker=%s",
                    "on" if depth else "off",
                    self.avg_run_s * 1000,
                    f" ({more} more changes since the last line)" if more else "",
                    self.worker_id,
                )
                self.pipelining_logged_at, self.pipelining_flips = now, 0
        return depth

    def prefetch(self) -> int:
        if self.fixed:
            return 0
        unchanged = self.key == (self.jobs_seen, self.target, self.avg_run_s)
        return (self.cached if unchanged else self._capacity())[1]

    def pipeline_room(self, slot: Slot, depth: int) -> int:
        most = self.worker.max_jobs_per_child
        return plan.pipeline_room(depth, len(slot.queued), slot.jobs_done, most)

    def _slots_free(self, now: float) -> int:
        depth = self.depth(now)
        free = self.slots.idle_count()
        if depth:
            for slot in self.slots.accepting():  # a loop: no generator, asked every pass
                free += self.pipeline_room(slot, depth)
        return free

    def room(self, now: float, taken: int = 0) -> int:
        """How many more jobs to lease now (less `taken`: asked for by other pops)."""
        if self.mode is not Mode.RUN or self.paused:  # not accepting(): every pass asks
            return 0
        held_ahead = len(self.ledger.buffer) + len(self.ledger.confirming) + taken
        return max(0, self._slots_free(now) + self.prefetch() - held_ahead)

    def urgent_room(self, now: float, taken: int = 0) -> int:
        """How many jobs to lease now, when leasing more is urgent (a child would
        wait, or the buffer ran half empty); else 0. The free slots are counted once;
        `taken`: jobs other pops out now asked for, as if buffered already."""
        if self.mode is not Mode.RUN or self.paused:  # not accepting(): every pass asks
            return 0
        free, prefetch, buffered = self._slots_free(now), self.prefetch(), len(self.ledger.buffer)
        room = free + prefetch - buffered - taken
        urgent = (buffered == 0 and free > taken) or buffered + taken < (prefetch + 1) // 2
        return room if room > 0 and urgent else 0
