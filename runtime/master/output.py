"""A child's output as its master reads it: every line a job prints (stdout and
stderr share one pipe) and every log record it emits reaches the worker's log
with the job's jid and klass, in the master's own format; the last 64 KiB of
each attempt is kept to go with its report (job.output).

The child marks each job's start and end on the pipe (runtime/children/joblog.py),
so lines are attributed exactly. A chatty job cannot flood the log or stall the
master: each child has a budget (BUDGET_BYTES_S); past it, lines are counted in
whole chunks, never split, and summarised once a second. I/O-free: the handle
feeds it bytes and the time.
"""

from __future__ import annotations

import json
import logging

from runtime.children import protocol

log = logging.getLogger("runtime.job")

BUDGET_BYTES_S = 1 << 20  # what one child may add to the log per second; the rest is counted
TAIL_BYTES = 64 * 1024  # kept of each attempt's output
LINE_MAX = 16 * 1024  # a longer line without a newline is logged in pieces
LINE_COST = 120  # what a logged line adds beyond its text (time, level, jid, klass, worker)


class Output:
    def __init__(self, index: int, worker_id: str) -> None:
        self.index = index
        self.worker_id = worker_id
        self.job: tuple[str, str] | None = None  # (jid, klass) of the job writing now
        self.partial = bytearray()  # an unfinished line
        self.tail = bytearray()  # the current (or last) attempt's last TAIL_BYTES
        self.tokens = float(BUDGET_BYTES_S)
        self.refilled_at: float | None = None
        self.dropped_lines = self.dropped_bytes = 0

    def tail_text(self, limit: int = TAIL_BYTES) -> str:
        return bytes(self.tail[-limit:]).decode("utf-8", "replace")

    def feed(self, chunk: bytes, now: float) -> None:
        """Takes what was read from the pipe."""
        self._refill(now)
        buf = bytes(self.partial) + chunk if self.partial else chunk
        self.partial.clear()
        start = 0
        while (mark := buf.find(protocol.MARK, start)) >= 0:
            eol = buf.find(b"\n", mark)
            if eol < 0:  # a marker not complete yet: keep it for the next read
                self._text(buf[start:mark], ended=True)
                self.partial += buf[mark:]
                return
            self._text(buf[start:mark], ended=True)
            self._marker(buf[mark:eol])
            start = eol + 1
        self._text(buf[start:], ended=False)

    def _text(self, data: bytes, ended: bool) -> None:
        """Printed text; `ended`: a marker follows, so an unfinished line is whole."""
        if not data:
            return
        self._keep(data)
        cut = len(data) if ended else data.rfind(b"\n") + 1
        if not ended and len(data) - cut > LINE_MAX:
            cut = len(data)
        self.partial += data[cut:]
        whole = data[:cut]
        if not whole:
            return
        count = max(1, whole.count(b"\n"))
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

    def _keep(self, data: bytes) -> None:
        self.tail += data
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]

    def _marker(self, line: bytes) -> None:
        if line.startswith(protocol.MARK_BEGIN):
            jid, _, klass = (
                line[len(protocol.MARK_BEGIN) :].decode("utf-8", "replace").partition(" ")
            )
            self.job = (jid, klass)
            self.tail.clear()
        elif line.startswith(protocol.MARK_END):
            self.summarise()  # what the job printed past its budget, told with its jid
            self.job = None
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
