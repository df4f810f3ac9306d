"""A child's output as its master reads it: every line a job prints (stdout and
stderr share one pipe) and every log record it emits reaches the worker's log
with the job's jid and klass, in the master's own format; the last 64 KiB of
each attempt is kept to go with its report (job.output).

Whose a line is: a child runs the jobs it is sent one after the other, in order,
and when it is done with one (ran it, or skipped it) it writes an end marker
(protocol.MARK_END) on the pipe, after what the job printed and before it says
so on its socket. So what is read while a job is the oldest one sent (`sent`)
and not ended is that job's; a child with none sent prints as itself. A job's
tail is put aside at its marker, for its report (`ended_tail`). A chatty job
cannot flood the log or stall the master: each child has a budget
(BUDGET_BYTES_S); past it, lines are counted in whole chunks, never split, and
summarised once a second. I/O-free: the handle feeds it bytes and the time.
"""

from __future__ import annotations

import json
import logging
from collections import deque

from runtime.children import protocol

log = logging.getLogger("runtime.job")

BUDGET_BYTES_S = 1 << 20  # what one child may add to the log per second; the rest is counted
TAIL_BYTES = 64 * 1024  # kept of each attempt's output
LINE_MAX = 16 * 1024  # a longer line without a newline is logged in pieces
LINE_COST = 120  # what a logged line adds beyond its text (time, level, jid, klass, worker)
ENDED_KEPT = 8  # tails of ended jobs kept for their reports (each is taken at once)
LIVE_BYTES_S = 32 * 1024  # a running job's live output per second (the rest is counted)


class Output:
    def __init__(self, index: int, worker_id: str) -> None:
        self.index = index
        self.worker_id = worker_id
        self.jobs: deque[tuple[str, str]] = deque()  # (jid, klass) sent, not ended, in order
        self.ended: dict[str, str] = {}  # jid -> the tail of a job that ended, until taken
        self.partial = bytearray()  # an unfinished line
        self.tail = bytearray()  # the current (or last) attempt's last TAIL_BYTES
        self.tokens = float(BUDGET_BYTES_S)
        self.refilled_at: float | None = None
        self.dropped_lines = self.dropped_bytes = 0
        self.live = bytearray()  # the running job's lines not yet taken (live output)
        self.live_dropped = 0  # its lines over LIVE_BYTES_S since the last take
        self.live_tokens = float(LIVE_BYTES_S)
        self.live_at: float | None = None

    def tail_text(self, limit: int = TAIL_BYTES) -> str:
        return bytes(self.tail[-limit:]).decode("utf-8", "replace") if self.tail else ""

    @property
    def job(self) -> tuple[str, str] | None:
        """(jid, klass) of the job writing now, if any."""
        return self.jobs[0] if self.jobs else None

    def sent(self, jid: str, klass: str) -> None:
        """The child was sent this job: it runs it after those sent before."""
        if not self.jobs:
            self.tail.clear()  # each attempt's tail starts empty
        self.jobs.append((jid, klass))

    def ended_tail(self, jid: str) -> str:
        """The tail of a job whose end marker was read (else of the job writing now)."""
        tail = self.ended.pop(jid, None)
        return self.tail_text() if tail is None else tail

    def _ended(self, jid: str) -> None:
        """The job's end marker: what it printed past its budget is told with its jid,
        its tail put aside, and the next job sent (if any) is the one writing."""
        if self.jobs and self.jobs[0][0] == jid:
            if self.dropped_bytes:
                self.summarise()
            self.ended[jid] = self.tail_text() if self.tail else ""
            if len(self.ended) > ENDED_KEPT:  # a skipped job's: no report takes it
                del self.ended[next(iter(self.ended))]
            self.jobs.popleft()
            self.tail.clear()
            self.live.clear()  # its output goes with its report
            self.live_dropped = 0
        else:  # none we know of (the marker of a job sent before a restart)
            log.debug("end marker of a job not sent jid=%s child=%d", jid, self.index)

    def feed(self, chunk: bytes, now: float) -> None:
        """Takes what was read from the pipe."""
        end = protocol.MARK_END
        if not self.partial and chunk.startswith(end) and chunk.endswith(b"\n"):
            # the most common read by far: the ends of jobs that printed nothing
            lines = chunk[:-1].split(b"\n")
            for line in lines:
                if not line.startswith(end):
                    break
            else:
                for line in lines:
                    self._ended(line[len(end) :].decode("utf-8", "replace"))
                return
        self._refill(now)
        # an unfinished line was kept in the tail when it came; a marked one was not
        kept = 0 if self.partial.startswith(protocol.MARK) else len(self.partial)
        buf = bytes(self.partial) + chunk if self.partial else chunk
        self.partial.clear()
        start = 0
        while (mark := buf.find(protocol.MARK, start)) >= 0:
            eol = buf.find(b"\n", mark)
            if eol < 0:  # a marker not complete yet: keep it for the next read
                self._text(buf[start:mark], ended=True, kept=kept)
                self.partial += buf[mark:]
                return
            self._text(buf[start:mark], ended=True, kept=kept)
            kept = 0
            self._marker(buf[mark:eol])
            start = eol + 1
        self._text(buf[start:], ended=False, kept=kept)

    def _text(self, data: bytes, ended: bool, kept: int = 0) -> None:
        """Printed text; `ended`: a marker follows, so an unfinished line is whole;
        `kept`: how many of its first bytes are in the tail already."""
        if not data:
            return
        self._keep(data[kept:])
        cut = len(data) if ended else data.rfind(b"\n") + 1
        if not ended and len(data) - cut > LINE_MAX:
            cut = len(data)
        self.partial += data[cut:]
        whole = data[:cut]
        if not whole:
            return
        count = max(1, whole.count(b"\n"))
        self._go_live(whole, count)
        cost = len(whole) + count * LINE_COST  # the budget is of the log's bytes
        if self.tokens < cost:  # over budget: counted, not split
            self.dropped_lines += count
            self.dropped_bytes += len(whole)
            self.tokens = 0.0
            return
        self.tokens -= cost
        for line in whole.splitlines():
            if line:
                self._log(logging.INFO, "%s", line.decode("utf-8", "replace"))

    def _go_live(self, lines: bytes, count: int) -> None:
        """Whole lines of the running job, for its followers (`take_live`): at most
        LIVE_BYTES_S a second; past it, lines are counted, not sent."""
        if self.job is None:
            return
        cut = len(lines)
        if self.live_tokens < cut:  # the lines that fit go; the others are counted
            cut = lines.rfind(b"\n", 0, int(self.live_tokens)) + 1
            self.live_dropped += lines.count(b"\n", cut) or count
        self.live_tokens -= cut
        self.live += lines[:cut]

    def take_live(self, now: float) -> tuple[str, str, int] | None:
        """The running job's lines since the last take: (jid, text, lines dropped)."""
        if self.live_at is not None:
            elapsed = max(0.0, now - self.live_at)
            self.live_tokens = min(float(LIVE_BYTES_S), self.live_tokens + elapsed * LIVE_BYTES_S)
        self.live_at = now
        if self.job is None or not (self.live or self.live_dropped):
            return None
        taken = (self.job[0], self.live.decode("utf-8", "replace"), self.live_dropped)
        self.live.clear()
        self.live_dropped = 0
        return taken

    def _keep(self, data: bytes) -> None:
        self.tail += data
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]

    def _marker(self, line: bytes) -> None:
        if line.startswith(protocol.MARK_END):
            self._ended(line[len(protocol.MARK_END) :].decode("utf-8", "replace"))
        elif line.startswith(protocol.MARK_LOG):
            self._record(line[len(protocol.MARK_LOG) :])

    def _record(self, body: bytes) -> None:
        """A log record of the job: logged under its logger and level; kept in the
        job's output as a line a person reads ("WARNING myapp.jobs: ...")."""
        try:
            record = json.loads(body)
            level, name, message = int(record["level"]), str(record["name"]), str(record["message"])
        except (ValueError, KeyError, TypeError):
            level, name, message = logging.INFO, "", body.decode("utf-8", "replace")
        line = f"{logging.getLevelName(level)} {name}: {message}\n" if name else message + "\n"
        self._keep(line.encode())
        self._go_live(line.encode(), 1)
        if self.tokens < len(body) + LINE_COST:
            self.dropped_lines += 1
            self.dropped_bytes += len(body)
            return
        self.tokens -= len(body) + LINE_COST
        self._log(level, "%s", message, logging.getLogger(name) if name else log)

    def _log(self, level: int, fmt: str, text: str, logger: logging.Logger = log) -> None:
        if self.job is not None:
            jid, klass = self.job
            logger.log(level, fmt + " jid=%s klass=%s worker=%s", text, jid, klass, self.worker_id)
        else:
            logger.log(level, fmt + " child=%d worker=%s", text, self.index, self.worker_id)

    def _refill(self, now: float) -> None:
        if self.refilled_at is None:
            self.refilled_at = now
        elapsed = now - self.refilled_at
        if elapsed <= 0:
            return
        self.refilled_at = now
        self.tokens = min(float(BUDGET_BYTES_S), self.tokens + elapsed * BUDGET_BYTES_S)
        if self.dropped_bytes and elapsed > 0 and self.tokens >= BUDGET_BYTES_S / 2:
            self.summarise()

    def summarise(self) -> None:
        """Says what was counted and not logged, if anything."""
        if self.dropped_bytes:
            text = f"{self.dropped_lines} lines ({self.dropped_bytes} bytes) of output not logged"
            self._log(logging.WARNING, "%s", f"{text}: over {BUDGET_BYTES_S >> 20} MiB/s")
            self.dropped_lines = self.dropped_bytes = 0
