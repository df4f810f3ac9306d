"""What a lease holder (a master) receives and reports: `Leased` jobs and the
`Popped` reply that brings them, the `Outcomes` it collects, and what its
calls answer (`ExchangeReply`, `RenewReply`). Pure values, no I/O:
runtime.queue.ops builds them from replies and encodes the rows;
runtime.queue.aio splits, sends and merges back the outcomes.

They live here, not in runtime/master/, because the Redis boundary makes and
reads every one of them, and imports go one way (master -> queue). The
master's own values (its events and actions, the held job's record) are in
runtime/master/events.py and held.py.

A reply is decoded one job at a time: a job that does not decode goes to
`Popped.corrupt` with its jid (when it has one), the others are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from runtime.config import LIMITS
from runtime.errors import CorruptReply, Error
from runtime.queue import wire

Kind = Literal["complete", "retry", "fail", "release"]


@dataclass  # not frozen (several times slower to make): one is made for every job leased
class Leased:
    """A job a pop leased to this master."""

    jid: str
    token: str
    klass: str
    queue: str
    data: dict[str, Any]
    attempt: int
    retries: int
    remaining: int
    lease_s: float
    timeout_s: float
    start_in_s: float | None = None  # leased before its turn: start this long after the pop
    expires_us: int | None = None  # when the lease runs out, on Redis's clock
    handed: bool = False  # handed to this master while it waited (a short first lease)
    batch: str | None = None  # the bid of its batch (runtime.queue.api.batches)
    traceparent: str | None = None  # W3C trace context of the span that put it

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Leased:
        """One job of a pop reply (or of a handoff); CorruptReply (with its jid when
        it has one) if it does not decode."""
        try:
            return cls._decode(reply)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CorruptReply(f"a leased job does not decode: {err!r}", _jid_of(reply)) from err

    @classmethod
    def _decode(cls, reply: dict[str, Any]) -> Leased:
        # once a job leased: the optional fields are read inline, not by helpers
        meta = reply["meta"]
        jid, token, data = reply["jid"], meta["l"], reply["data"]
        if not isinstance(jid, str) or not isinstance(token, str) or not isinstance(data, dict):
            raise TypeError("jid and token must be text, data an object")
        expires_us, batch = reply.get("expires_us"), meta.get("b")
        return cls(
            jid=jid,
            token=token,
            klass=str(meta["k"]),
            queue=str(meta["q"]),
            data=data,
            attempt=int(meta.get("a", 1)),
            retries=int(meta["r"]),
            remaining=int(meta["m"]),
            lease_s=float(reply["lease_ms"]) / 1000,
            timeout_s=float(reply["timeout_s"]),
            start_in_s=float(reply["start_in_us"]) / 1e6 if "start_in_us" in reply else None,
            expires_us=None if expires_us is None else int(expires_us),
            handed=bool(reply.get("handed")),
            batch=None if batch is None else str(batch),
            traceparent=meta.get("tp"),
        )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _jid_of(reply: Any) -> str | None:
    jid = reply.get("jid") if isinstance(reply, dict) else None
    return jid if isinstance(jid, str) else None


@dataclass(frozen=True)
class Popped:
    jobs: list[Leased]
    wake_in_s: float | None  # None: nothing comes due, or the pop was full
    refill: list[dict[str, Any]] = field(default_factory=list)  # cron recurrences low on ticks
    now_us: int | None = None  # Redis's clock when the pop ran
    corrupt: list[tuple[str | None, str]] = field(default_factory=list)  # (jid, why) undecodable

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Popped:
        jobs: list[Leased] = []
        corrupt: list[tuple[str | None, str]] = []
        for item in reply["jobs"]:
            try:
                jobs.append(Leased.from_reply(item))
            except CorruptReply as err:
                corrupt.append((err.jid, str(err)))
        wake = float(reply["wake_in_ms"])
        refill = reply.get("refill", [])
        if not isinstance(refill, list):
            raise TypeError("refill must be a list")
        return cls(
            jobs,
            None if wake < 0 else wake / 1000,
            refill,
            _int_or_none(reply.get("now_us")),
            corrupt,
        )


# The rows of the reports: named, and in the order the scripts take their arguments.


class CompleteRow(NamedTuple):
    jid: str
    token: str
    options: str  # JSON (wire.report_options)
    result: str  # JSON text, "" for none
    output: str
    usage: str = ""  # wire.usage_text(), "" for none measured


class RetryRow(NamedTuple):
    jid: str
    token: str
    group: str
    message: str
    delay_ms: int  # -1: the queue's backoff
    output: str
    usage: str = ""


class FailRow(NamedTuple):
    jid: str
    token: str
    group: str
    message: str
    output: str
    usage: str = ""


class ProgressRow(NamedTuple):
    jid: str
    token: str
    done: float
    total: float | None
    message: str | None


class LiveRow(NamedTuple):
    jid: str
    token: str
    text: str  # lines a running job printed since its last batch
    dropped: int  # lines not sent (over the job's budget)


def _tail(text: str, cap: int) -> str:
    """The last `cap` bytes of `text`, whole characters."""
    if len(text) * 4 <= cap:
        return text
    data = text.encode("utf-8", "replace")
    return text if len(data) <= cap else data[-cap:].decode("utf-8", "ignore")


class PutRow(NamedTuple):
    jid: str
    spec: str  # JSON
    data: str  # JSON
    by: str | None  # the job putting it


@dataclass
class Outcomes:
    """Reports collected by a master, sent together by the next exchange: the
    lease holder's reports (complete, retry, fail, release), the running jobs'
    progress and the jobs they put at once. Failure messages are cut to
    LIMITS["message_max_bytes"] (their tail kept) and outputs to
    LIMITS["output_max_bytes"] as they are added: a huge traceback or output
    never leaves the master."""

    complete: dict[str, CompleteRow] = field(default_factory=dict)  # jid -> row
    retry: list[RetryRow] = field(default_factory=list)
    fail: list[FailRow] = field(default_factory=list)
    release: dict[str, str] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # released jids that had started running
    progress: dict[str, ProgressRow] = field(default_factory=dict)  # jid -> its latest
    puts: list[PutRow] = field(default_factory=list)  # jobs put at once (now=True)
    live: dict[str, LiveRow] = field(default_factory=dict)  # running jobs' output, by jid

    def __len__(self) -> int:
        reports = len(self.complete) + len(self.retry) + len(self.fail) + len(self.release)
        return reports + len(self.progress) + len(self.puts) + len(self.live)

    def __bool__(self) -> bool:
        """Whether there is anything to send: asked several times a loop pass, so
        without counting (the truth of each part, no len() calls)."""
        return bool(
            self.complete
            or self.retry
            or self.fail
            or self.release
            or self.progress
            or self.puts
            or self.live
        )

    def add_complete(
        self,
        jid: str,
        token: str,
        *,
        result: str = "",
        output: str = "",
        note: str | None = None,
        puts: Iterable[Sequence[str]] = (),
        usage: str = "",
    ) -> None:
        """Completes a job. `result`: its return value as JSON text ("" for none);
        `output`: the attempt's output tail; `note`: a line for its history (e.g.
        why no result came); `puts`: (spec JSON, data JSON) pairs
        (JobSpec.to_wire()) put in the same step as the completion; `usage`:
        what the attempt cost (wire.usage_text, "" for none)."""
        options = wire.report_options(note, puts)
        output = wire.cap_output(output)
        self.live.pop(jid, None)  # its output goes with its report
        self.complete[jid] = CompleteRow(jid, token, options, result, output, usage)

    def add_retry(
        self,
        jid: str,
        token: str,
        group: str,
        message: str,
        delay_ms: int,
        *,
        output: str = "",
        usage: str = "",
    ) -> None:
        message, output = wire.cap_message(message), wire.cap_output(output)
        self.live.pop(jid, None)
        self.retry.append(RetryRow(jid, token, group, message, delay_ms, output, usage))

    def add_fail(
        self, jid: str, token: str, group: str, message: str, *, output: str = "", usage: str = ""
    ) -> None:
        message, output = wire.cap_message(message), wire.cap_output(output)
        self.live.pop(jid, None)
        self.fail.append(FailRow(jid, token, group, message, output, usage))

    def add_release(self, jid: str, token: str, *, started: bool = False) -> None:
        """Gives a job back unfinished; `started`: it ran (its attempt counts, no retry
        is spent), else it never started (the attempt is not counted)."""
        self.release[jid] = token
        self.live.pop(jid, None)
        if started:
            self.started.add(jid)

    def add_progress(
        self, jid: str, token: str, done: float, total: float | None, message: str | None
    ) -> None:
        """A running job's progress; only the latest of a job goes. BadArgument
        unless done and total (or None) are finite numbers >= 0."""
        total = None if total is None else wire.check_progress(total)
        self.progress[jid] = ProgressRow(jid, token, wire.check_progress(done), total, message)

    def add_put(self, spec_json: str, data_json: str, *, by: str | None = None) -> None:
        """A job put at once (JobSpec.to_wire() pair); `by`: the jid of the running
        job putting it (its history counts it). BadArgument for a spec that is
        not a JSON object with its jid."""
        jid, spec_json = wire.put_with_by(spec_json, by)
        self.puts.append(PutRow(jid, spec_json, data_json, by))

    def add_live(self, jid: str, token: str, text: str, dropped: int) -> None:
        """Lines a running job printed (and how many were dropped), after those
        not sent yet; a batch keeps its last live_max_bytes."""
        row = self.live.get(jid)
        if row is not None:
            text, dropped = row.text + text, row.dropped + dropped
        self.live[jid] = LiveRow(jid, token, _tail(text, LIMITS["live_max_bytes"]), dropped)

    def take(self) -> Outcomes:
        """These outcomes, leaving this collection empty."""
        taken = Outcomes(
            self.complete,
            self.retry,
            self.fail,
            self.release,
            self.started,
            self.progress,
            self.puts,
            self.live,
        )
        self.complete, self.retry, self.fail, self.release = {}, [], [], {}
        self.started, self.progress, self.puts, self.live = set(), {}, [], {}
        return taken

    def merge(self, older: Outcomes) -> None:
        """Puts back outcomes that could not be sent, ahead of newer ones."""
        self.complete = {**older.complete, **self.complete}
        self.retry[:0] = older.retry
        self.fail[:0] = older.fail
        self.release = {**older.release, **self.release}
        self.started |= older.started
        self.progress = {**older.progress, **self.progress}
        self.puts[:0] = older.puts
        newer, self.live = self.live, dict(older.live)
        for row in newer.values():
            self.add_live(row.jid, row.token, row.text, row.dropped)

    def only(self, kind: Kind) -> Outcomes:
        """A collection of this one's outcomes of one kind."""
        part = Outcomes()
        setattr(part, kind, getattr(self, kind))
        if kind == "release":
            part.started = set(self.started)
        return part

    def kinds(self) -> Iterator[Kind]:
        """The kinds of reports present, in the order they are sent (after the
        progress and the puts)."""
        kinds: tuple[Kind, ...] = ("complete", "retry", "fail", "release")
        return (kind for kind in kinds if getattr(self, kind))

    def jids(self, kind: Kind) -> list[str]:
        rows = getattr(self, kind)
        return list(rows) if isinstance(rows, dict) else [row.jid for row in rows]

    def puts_by_job(self) -> dict[str | None, list[PutRow]]:
        """The puts grouped by the job putting them, in order (each group is one
        all-or-nothing put)."""
        groups: dict[str | None, list[PutRow]] = {}
        for row in self.puts:
            groups.setdefault(row.by, []).append(row)
        return groups


@dataclass(frozen=True)
class ExchangeReply:
    """What one exchange answered.

    states: {jid: its state after the report, or the error that refused it}
    popped: the pop's reply (None when no pop was asked)
    sent_at: time.monotonic() just before the request was written (after the
        connection was up): leases granted by the pop started after it
    unsent: reports Redis could not take now (a transient refusal of their
        call while the pop went through): merge them back and send them again
    put: the jobs put at once (Outcomes.puts), by the jid of their spec: the
        jid put (a unique key's holder for a duplicate), or the Error refusing
        the put of that job and the others its job put with it (JobExists for
        a put sent again after a lost reply: the first one landed). The
        progress reports' answers are not kept (a refusal means the job is
        gone or no longer ours: its own report says so)
    """

    states: dict[str, str | Error]
    popped: Popped | None
    sent_at: float
    unsent: Outcomes = field(default_factory=Outcomes)
    put: dict[str, str | Error] = field(default_factory=dict)


@dataclass(frozen=True)
class RenewReply:
    """What one lease renewal answered: the jids no longer ours (stop them), and
    time.monotonic() just before the request was written."""

    lost: set[str]
    sent_at: float
    renewed: set[str] = field(default_factory=set)
