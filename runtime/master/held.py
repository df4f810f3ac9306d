"""A job the master holds, and where it is: the record of the master's ledger
(ledger.py), one per jid from the moment a pop leases it until Redis has taken
its report. Also the few timings the book's parts share."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from runtime import config
from runtime.master import plan
from runtime.queue.leases import Leased

FLUSH_AFTER_S = 0.002  # how long a finished job's report may wait for company
FLUSH_BATCH = 32  # reports that go at once, however young
AHEAD_S = 0.005  # pops also lease jobs whose turn comes within this: they start on time
WITHDRAW_AFTER_S = 0.05  # a pipelined job waits about this long at most behind a long one
HANDOFF_EARLY_S = 0.002  # a job leased before its turn goes to a child this long before it
LOOK_LATE_S = 0.002  # a token's 'look then' is acted on this long after (a clock's rounding)
TICK_S = 0.1  # how often running jobs are checked (timeouts, memory, leases)
STOP_REPORT_WAIT_S = 10.0  # stopping with Redis out of reach: the longest wait to report


class Where(enum.Enum):
    CONFIRMING = "confirming"  # handed to us on a short first lease: started once renewed
    BUFFERED = "buffered"
    TIMED = "timed"
    PIPELINED = "pipelined"
    WITHDRAWING = "withdrawing"  # pipelined, and asked back: the child skips it or runs it
    RUNNING = "running"
    REPORTING = "reporting"


class Mode(enum.Enum):
    RUN = "run"
    FINISH = "finish"  # QUIT: no new jobs, exit when the running ones are done
    DRAIN = "drain"  # TERM: as FINISH, but running jobs are given back at the deadline


@dataclass
class Held:
    """One job this master holds: where it is, its flags and its times. Written by
    the ledger alone (ledger.py): `move` changes its place and stamps the times a
    place brings (RUNNING: `sent_at`, `last_sign`); the ledger's other methods set
    its flags and the rest of its times. Everyone else reads it."""

    leased: Leased
    where: Where
    lease_until: float  # monotonic: the lease is known to hold until then
    start_at: float | None = None  # leased before its turn: it starts then
    renewed: bool = False  # its lease was renewed at least once
    slot: int | None = None  # the child holding it (pipelined, running)
    sent_at: float | None = None  # running: when it started (stamped by the move)
    last_sign: float = 0.0  # running: start, or the child's latest heartbeat
    terminated_at: float | None = None  # SIGTERM sent (timeout)
    killed_at: float | None = None  # SIGKILL sent: SIGTERM was ignored for the kill grace
    lost: bool = False  # Redis said its lease is gone
    cancelled: bool = False  # cancelled while held: nothing of it is reported
    shard: int = 0  # the namespace it came from, where it is renewed and reported (book.py)
    puts: list[tuple[str, str]] = field(default_factory=list)  # jobs put with its completion

    @property
    def jid(self) -> str:
        return self.leased.jid

    def running_for(self, now: float) -> float:
        """How long it has run (0 for a job not started: `sent_at` is stamped by the
        move to RUNNING, which the ledger's invariants check)."""
        return 0.0 if self.sent_at is None else now - self.sent_at

    def start_before(self) -> float:
        """The latest time it may start (plan.start_before)."""
        return plan.start_before(self.lease_until, self.renew_length_s())

    def renew_due_at(self) -> float:
        """When its lease is to be renewed: at once for a job handed to us that is
        not yet confirmed (it starts only once renewed), else planned on its lease."""
        if self.where is Where.CONFIRMING:
            return 0.0
        return plan.renew_at(self.lease_until, self.renew_length_s())

    def renew_length_s(self) -> float:
        """The length of the lease it holds now, which its renewal and the margins
        before its end are planned on: a job handed to an idle master has a short
        first lease (handoff.lua)."""
        if self.leased.handed and not self.renewed:
            return min(self.leased.lease_s, config.LIMITS["handoff_lease_ms"] / 1000)
        return self.leased.lease_s
