"""What a job writes, as its master reads it.

A child's stdout and stderr are one pipe to its master. When the child is done
with a job (ran it, or skipped it) it writes an end marker on it
(protocol.MARK_END), after flushing what the job printed, and before it says so
on the socket: so the master knows whose every line is (the jobs it sent run in
order) and has all of a job's output when its outcome comes. Log records go on
the same pipe as one marked JSON line each, so the master logs them with their
level and logger, the job's jid and klass, in its own format.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from runtime.children import protocol

OUT_FD = 2  # stderr: the pipe to the master (stdout is the same pipe)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - after every job: a try costs nothing, suppress three calls
            stream.flush()  # nothing to write, no system call
        except (OSError, ValueError):
            pass


def _write(line: bytes) -> None:
    try:  # noqa: SIM105 - as in _flush
        os.write(OUT_FD, line)  # short: one atomic write on a pipe
    except OSError:
        pass


def end(jid: str) -> None:
    """The child is done with `jid`: what it printed goes first, then the marker."""
    _flush()
    _write(protocol.MARK_END + jid.encode() + b"\n")


class ToMaster(logging.Handler):
    """Sends each record to the master as one marked line (tracebacks included)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            body = {"level": record.levelno, "name": record.name, "message": message}
            _flush()
            _write(protocol.MARK_LOG + json.dumps(body, ensure_ascii=False).encode() + b"\n")
        except Exception:  # noqa: BLE001 - logging must never break a job
            self.handleError(record)


def set_up_logging(level: str) -> None:
    """The child's logging: every record at `level` and above goes to the master."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(ToMaster())
    root.setLevel(level.upper())
