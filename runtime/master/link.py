"""The master's view of its link to Redis: up, or down since when and why.

Pure: the book tells it of every call's success or failure with the time, and
asks whether a call may go now. While Redis is down only one call at a time
goes (a probe), after a capped, jittered backoff; the first call that succeeds
brings the link up. It logs one line when the link goes down and one when it
comes back (naming every reason met meanwhile); a link that keeps flapping is summarised,
not logged at every turn.

`outage_ms` is what a probe tells Redis (resumed.lua): how long this master
could not reach it, so leases that ran out meanwhile by Redis's clock are not
taken from live masters before they report.
"""

from __future__ import annotations

import logging
import random

from runtime.errors import Condition
from runtime.master import plan

log = logging.getLogger(__name__)

FLAP_WINDOW_S = 10.0  # a new outage this soon after the last one logged is only counted


class Link:
    def __init__(self, worker_id: str, rng: random.Random) -> None:
        self.worker_id = worker_id
        self.rng = rng
        self.up = True
        self.down_since: float | None = None  # monotonic: the first failure of this outage
        self.condition: Condition | None = None  # while down: the last failure's
        self.seen: list[Condition] = []  # the conditions met during this outage
        self.failures = 0
        self.retry_at = 0.0
        self.probing = False  # a call is out while the link is down
        self.logged_at = -1e18  # when an outage was last logged
        self.unlogged = 0  # outages since, not logged (flapping)

    def may_call(self, now: float) -> bool:
        """Whether a call may go now (one at a time while down, after the backoff)."""
        return self.up or (not self.probing and now >= self.retry_at)

    def sending(self) -> None:
        """A call goes out now (while down: the probe)."""
        if not self.up:
            self.probing = True

    def outage_ms(self, now: float) -> int:
        """For a call sent now: how long Redis has been out of reach (0: it is not)."""
        if self.up or self.down_since is None:
            return 0
        return max(1, round((now - self.down_since) * 1000))

    def failed(
        self, now: float, condition: Condition, detail: str, shortest_lease_s: float | None
    ) -> None:
        """A call failed: the link is down (or stays down), next try after a backoff."""
        self.probing = False
        if self.up:
            self._log_down(now, condition, detail)
            self.up, self.down_since, self.failures, self.seen = False, now, 0, [condition]
        elif condition not in self.seen:
            self.seen.append(condition)  # told with the line that ends the outage
        self.condition = condition
        self.retry_at = now + plan.backoff_s(self.failures, shortest_lease_s, self.rng)
        self.failures += 1

    def succeeded(self, now: float, sent_at: float) -> bool:
        """A call sent at `sent_at` succeeded. True when it ended an outage (a call
        sent before the outage began proves nothing about now)."""
        self.probing = False
        if self.up or self.down_since is None or sent_at < self.down_since:
            return False
        lasted_s = now - self.down_since
        if self.unlogged == 0 or now - self.logged_at >= FLAP_WINDOW_S:
            log.warning(
                "Redis available again after %.1f s (%s) worker=%s",
                lasted_s,
                ", ".join(self.seen),
                self.worker_id,
            )
        self.up, self.down_since, self.condition, self.failures = True, None, None, 0
        return True

    def _log_down(self, now: float, condition: Condition, detail: str) -> None:
        if now - self.logged_at < FLAP_WINDOW_S:
            self.unlogged += 1  # flapping: counted, told with the next line logged
            return
        more = f" ({self.unlogged} more outages since the last one logged)" if self.unlogged else ""
        log.warning(
            "Redis unavailable (%s): %s; retrying with backoff%s worker=%s",
            condition,
            detail,
            more,
            self.worker_id,
        )
        self.logged_at, self.unlogged = now, 0
