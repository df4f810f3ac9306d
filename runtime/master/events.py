"""The book's vocabulary: the events that come into it and the actions that come
out. Events are put on the master's one queue by its sources (child sockets,
the fork server, Redis calls, the handoff waiter, signals, timers); actions are
carried out by the loop (master.py). All are plain values, never changed once
made; they are not frozen dataclasses only because a frozen one sets each field
through object.__setattr__, several times slower to make, and several are made
for every job.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from runtime.children import protocol
from runtime.errors import Condition
from runtime.queue.leases import Leased, Outcomes, Popped


class Intent(enum.Enum):
    """What a signal asks of the master (the handlers record only this)."""

    DRAIN = "drain"  # TERM, INT
    FINISH = "finish"  # QUIT
    KILL_JOBS = "kill-jobs"  # USR1
    PAUSE = "pause"  # USR2
    RESUME = "resume"  # CONT
    REPLACE = "replace"  # HUP
    GROW = "grow"  # TTIN
    SHRINK = "shrink"  # TTOU


# --- events -------------------------------------------------------------------------


@dataclass
class Signalled:
    intent: Intent


@dataclass
class ChildSpawned:
    index: int
    pid: int


@dataclass
class SpawnFailed:
    index: int
    error: str


@dataclass
class ChildSaid:
    """A message from a child's socket."""

    index: int
    pid: int
    message: protocol.Message
    output: str = ""  # with done or failed: the last of the job's output (job.output)
    rss_bytes: int | None = None  # with done or failed: the child's memory then (if asked)


@dataclass
class ChildPrinted:
    """Lines the running job of a child printed since the last batch (live output,
    runtime/master/output.py), and how many were dropped over its budget."""

    index: int
    pid: int
    jid: str
    text: str
    dropped: int


@dataclass
class ChildBroke:
    """A child broke the protocol (a bad or incomplete frame)."""

    index: int
    pid: int
    error: str


@dataclass
class ChildExited:
    index: int
    pid: int
    code: int | None
    signal: int | None
    tail: str  # the last of its output, to explain a crash


@dataclass
class Exchanged:
    """An exchange came back: the reports' states, and what the pop leased."""

    outcomes: Outcomes
    asked: int | None  # how many jobs the pop asked for (None: no pop)
    states: dict[str, Any]  # jid -> state, or the runtime.errors.Error refusing it
    popped: Popped | None
    sent_at: float  # monotonic, when the request went out (after connecting)
    received_at: float
    unsent: Outcomes | None = None  # reports Redis refused for now (sent again)
    shard: int = 0  # the namespace it went to (the book's shards)


@dataclass
class ExchangeFailed:
    outcomes: Outcomes  # not sent (or not known to be): they go again
    condition: Condition  # why, in one word
    detail: str
    sent_at: float
    shard: int = 0


@dataclass
class Renewed:
    leases: dict[str, str]  # what was renewed: jid -> token
    lost: frozenset[str]
    sent_at: float
    shard: int = 0


@dataclass
class RenewFailed:
    leases: dict[str, str]
    condition: Condition
    detail: str
    sent_at: float
    shard: int = 0


@dataclass
class WaitEnded:
    """The idle master's blocking read returned: a job handed to it, a wake-up
    token (`key` it came from), or nothing (timeout). A handed job comes with its
    confirming renewal when the read made it at once and Redis answered it
    (`confirmed`: the job starts, or its lease is gone); without, the book
    renews it as any job handed to it and starts it on that answer."""

    handed: Leased | None = None
    key: str | None = None
    own: bool = False  # the key is this master's own list
    at_us: int | None = None  # a queue's token says: look then (Redis time), not now
    shard: int = 0
    confirmed: Renewed | None = None  # the handed job's renewal, answered


@dataclass
class WaitFailed:
    condition: Condition
    detail: str
    sent_at: float
    shard: int = 0


@dataclass
class Cancelled:
    """A job this master may hold was cancelled (cancel.lua told us)."""

    jid: str


@dataclass
class ServerReplaced:
    """HUP: a new fork server (fresh code) is up; `generation` counts them."""

    generation: int


@dataclass
class ServerExited:
    """The fork server died by itself (reaped; its children died with it)."""

    pid: int
    code: int | None
    signal: int | None


@dataclass
class Rss:
    """Memory of the busy children, read by the loop for the book's checks."""

    by_index: dict[int, int]


# --- actions ------------------------------------------------------------------------


@dataclass
class Spawn:
    index: int


@dataclass
class Post:
    """A message for a child; the loop writes each child's posts at once."""

    index: int
    message: protocol.Message


@dataclass
class Kill:
    index: int
    signal: int


@dataclass
class Exchange:
    outcomes: Outcomes
    pop: int | None  # None: no pop; 0: only learn when something comes due
    queues: tuple[str, ...]
    outage_ms: int
    shard: int = 0


@dataclass
class Renew:
    leases: dict[str, str]
    outage_ms: int
    shard: int = 0
    confirms: bool = False  # it confirms a job handed to us: that job starts on its answer


@dataclass
class Wait:
    """Start the blocking read for work (a job handed to us, or a wake-up token)."""

    shard: int = 0


@dataclass
class StopWaiting:
    shard: int = 0


@dataclass
class GiveBack:
    """A wake-up token we cannot use: back to its list for another master."""

    key: str
    shard: int = 0


@dataclass
class ReplaceServer:
    pass


@dataclass
class Extend:
    """A cron recurrence runs low on ticks: compute more."""

    low: dict[str, Any]
    shard: int = 0


@dataclass
class Register:
    """Tell Redis who this master is and how many children it wants."""

    concurrency: int
    shard: int = 0


@dataclass
class Trim:
    """Redis is full (oom): delete what retention lets go (completed jobs past
    jobs-history or jobs-history-count) before waiting for room."""

    shard: int = 0


@dataclass
class ReportFailure:
    """A final failure the master saw (a crash, a limit): to Sentry."""

    group: str
    message: str
    tags: dict[str, Any]


Event = (
    Signalled
    | ChildSpawned
    | SpawnFailed
    | ChildSaid
    | ChildPrinted
    | ChildBroke
    | ChildExited
    | Exchanged
    | ExchangeFailed
    | Renewed
    | RenewFailed
    | WaitEnded
    | WaitFailed
    | ServerReplaced
    | ServerExited
    | Rss
    | Cancelled
)
Action = (
    Spawn
    | Post
    | Kill
    | Exchange
    | Renew
    | Wait
    | StopWaiting
    | GiveBack
    | ReplaceServer
    | Extend
    | ReportFailure
    | Register
    | Trim
)
