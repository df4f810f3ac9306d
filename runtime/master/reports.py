"""The reports a master owes Redis: the outcomes collected since the last exchange
(`Outcomes`), since when the oldest of them waits (a batch leaves at most
FLUSH_AFTER_S after it), the ones an exchange carries now, and the jids
cancelled while their report was out (nothing is said of them). Pure."""

from __future__ import annotations

from runtime.queue.leases import Outcomes


class Reports:
    def __init__(self) -> None:
        self.outcomes = Outcomes()
        self.since: float | None = None  # when the oldest unsent report was made
        self.sending: Outcomes | None = None  # what the exchange out now carries
        self.cancelled: set[str] = set()  # reports of jobs cancelled meanwhile

    def noted(self, now: float) -> None:
        """A report waits to go: the oldest one sets when the batch must leave."""
        if self.since is None:
            self.since = now

    def take(self) -> Outcomes:
        """Everything collected, for the exchange that goes now."""
        self.sending, self.since = self.outcomes.take(), None
        return self.sending

    def hold(self) -> Outcomes:
        """Nothing for the exchange that goes now: the reports wait for a later one."""
        self.sending = Outcomes()
        return self.sending

    def put_back(self, outcomes: Outcomes, sent_at: float, now: float) -> None:
        """Reports an exchange sent at `sent_at` could not deliver: they go again,
        ahead of newer ones, and count as waiting since they were sent."""
        self.sending = None
        self.outcomes.merge(outcomes)
        self.since = min(self.since or now, sent_at)

    def drop(self, jid: str, token: str) -> None:
        """A waiting report of a lease that is gone (its job was leased again): Redis
        would only refuse it. Reports of the job's other leases stay."""
        out = self.outcomes
        if (row := out.complete.get(jid)) is not None and row.token == token:
            del out.complete[jid]
        if (progress := out.progress.get(jid)) is not None and progress.token == token:
            del out.progress[jid]
        if out.release.get(jid) == token:
            del out.release[jid]
            out.started.discard(jid)
        out.retry = [r for r in out.retry if r.jid != jid or r.token != token]
        out.fail = [f for f in out.fail if f.jid != jid or f.token != token]

    def jids(self) -> set[str]:
        """The jobs whose report waits or is out (for the checks)."""
        pending = [self.outcomes, *([self.sending] if self.sending is not None else [])]
        return {jid for out in pending for kind in out.kinds() for jid in out.jids(kind)}
