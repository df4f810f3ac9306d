"""What a master shows of itself: its process title, and systemd's STATUS and
WATCHDOG. Both notifications go from the main loop's pass, so a WATCHDOG ping
proves that the loop makes progress, not only that some task still runs."""

from __future__ import annotations

import math
from collections.abc import Callable

from runtime.master.notify import Notifier
from runtime.proctitle import set_title

STATUS_EVERY_S = 0.5  # at most this often a STATUS change goes to systemd
TITLE_EVERY_S = 0.05  # at most this often the state is described (the process title)


class Status:
    def __init__(self, notifier: Notifier, worker_id: str) -> None:
        self.notifier = notifier
        self.worker_id = worker_id
        self.title = ""
        self.sent, self.sent_at = "", -math.inf
        self.ping_every_s = (notifier.watchdog_s or 0.0) / 2  # systemd's advice
        self.pinged_at = -math.inf
        self.described_at = -math.inf
        self.stale = False  # a pass came since the state was last described

    def show(self, describe: Callable[[], str], now: float) -> None:
        """Called on every pass: the title when it changes, STATUS when it changed
        (rate-limited), WATCHDOG when one is due. The state is described at most every
        TITLE_EVERY_S (a busy master makes thousands of passes a second)."""
        ping = self.ping_every_s and now - self.pinged_at >= self.ping_every_s
        if now - self.described_at < TITLE_EVERY_S and not ping:
            self.stale = True
            return
        self.described_at, self.stale = now, False
        text = describe()
        if text != self.title:
            self.title = text
            set_title(f"runtime master {self.worker_id} {text}")
        if text != self.sent and now - self.sent_at >= STATUS_EVERY_S:
            self.sent, self.sent_at = text, now
            self.notifier.status(text)
        if ping:
            self.pinged_at = now
            self.notifier.watchdog()

    def next_due(self, now: float) -> float | None:
        """Seconds until a pass has something to send (None: nothing pending)."""
        due = self.described_at + TITLE_EVERY_S if self.stale else math.inf  # every pass:
        if self.title != self.sent and self.sent_at + STATUS_EVERY_S < due:  # no list, min()
            due = self.sent_at + STATUS_EVERY_S
        if self.ping_every_s and self.pinged_at + self.ping_every_s < due:
            due = self.pinged_at + self.ping_every_s
        if due == math.inf:
            return None
        return due - now if due > now else 0.0
