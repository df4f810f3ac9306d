"""The child: runs one job at a time for its master, over one socket.

Its loop reads as its steps: receive a job, check it may still start, import the
klass through the allow-list, call it, report, clean the sandbox.

A reader thread takes the master's messages off the socket while a job runs, so a
job that never yields cannot stop them; an idle child reads them on its main
thread (the reader thread, woken by an eventfd, lets go of the socket meanwhile),
so a job sent to it starts as its message is read, without a hand-off between
threads. The reader thread takes the socket only once a job has run READER_LAZY_S
(it looks on a tick while jobs come, and sleeps until woken after READER_PARK_S
without one): a short job never wakes it, so no thread competes with the job
for the interpreter as it starts, and the jobs sent ahead of it wait on the
socket for the main thread. It keeps the lease deadline of every job the child
holds (the running one, and the one or two the master sent ahead while jobs are
short): `deadline` messages move them, `withdraw` drops a job that has not started
(answered by `skipped`), and when the running job's deadline passes (its master
stopped renewing: frozen, or cut off from Redis) the child stops itself before
the lease can expire in Redis, whichever thread holds the socket. A job whose
deadline passed while it waited is skipped, never started. Exit codes tell the
master what happened (exits.ExitCode).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from runtime import sentry
from runtime.children import allowlist, joblog, protocol, tracing, usage
from runtime.children.context import JobContext
from runtime.children.exits import ExitCode
from runtime.errors import (
    Fail,
    KlassNotAllowed,
    KlassNotFound,
    ProtocolError,
    Retry,
    SandboxError,
)
from runtime.proctitle import set_title
from runtime.queue.shards import Shards
from runtime.sandbox import sandbox
from runtime.vocabulary import FailureGroup

log = logging.getLogger(__name__)

SPIN_S = 0.0005  # the end of a wait for a job's turn is spun, not slept
READER_LAZY_S = 0.02  # a job runs this long before the reader thread reads for it
READER_PARK_S = 1.0  # idle this long, the reader thread stops looking (woken by a job)
RESULT_MAX_BYTES = 64 << 20  # the largest result a child sends (Redis keeps result-max-bytes)


class Terminated(BaseException):
    """Raised in the job by SIGTERM, so its finally blocks run before the child exits."""


@dataclass
class Settings:
    """What a child knows beyond its messages (inherited from the fork server)."""

    index: int
    modules: tuple[str, ...]
    workdir: Path
    worker: str
    sentry_dsn: str | None = None
    log_level: str = "INFO"  # the worker's: a job's log records below it are dropped
    namespace: str = ""  # the master's, and the site's rule: ctx.put stays in the job's shard
    shards: str = ""
    otel: bool = False  # each attempt in a span (runtime/children/tracing.py)
    otel_file: str | None = None


def _on_term(signum: int, frame: Any) -> None:
    raise Terminated


class Child:
    def __init__(self, sock: socket.socket, settings: Settings) -> None:
        self.sock = sock
        self.settings = settings
        self.shards = Shards.parse(settings.shards, settings.namespace) if settings.shards else None
        self.inbox: queue.SimpleQueue[protocol.Run | None] = queue.SimpleQueue()
        self.frames = protocol.FrameBuffer()  # read off the socket by whoever holds `reading`
        self.reading = threading.Lock()  # held by the one thread reading the socket
        self.reader_turn = threading.Event()  # set: the reader thread reads (a job runs)
        self.wake = -1  # an eventfd that tells the reader thread to let go (serve)
        self.send_lock = threading.Lock()
        self.lock = threading.Lock()  # guards the ones below (reader and main thread)
        self.started_at = 0.0  # monotonic: the running job began
        self.idle_since = time.monotonic()  # the last job ended
        self.parked = False  # the reader thread waits to be woken, no longer looks
        self.deadlines: dict[str, float] = {}  # jid -> lease deadline of each job held
        # held jobs the master took back: for each, how many of its Runs still queued
        # are to be skipped (a job withdrawn, given back and sent to this child again
        # is queued here more than once; only its last Run may start, in its place)
        self.withdrawn: dict[str, int] = {}
        self.running: str | None = None  # jid of the job being run
        self.functions: dict[str, Any] = {}  # klass -> callable, resolved once
        self.context: JobContext | None = None  # the running job's
        self.workdir_seen: int | None = None  # its ctime when last found empty (trusted)
        self.meter = usage.Meter()  # what each job costs
        self.tracing = (
            tracing.Tracer(settings.worker, settings.otel_file) if settings.otel else None
        )

    def _shard_of(self, queue: str) -> str:
        """The namespace a job of `queue` came from: its queue's, on a sharded site
        (a master may serve several), else the master's."""
        return self.settings.namespace if self.shards is None else self.shards.namespace_of(queue)

    # --- messages ---------------------------------------------------------------

    def send(self, message: protocol.Message) -> None:
        frame = protocol.encode(message)
        with self.send_lock:
            self.sock.sendall(frame)

    def _wait_s(self) -> float | None:
        """Until the earliest deadline that matters: the running job's, or one a held
        job may still start under (those already past are skipped, never started)."""
        now, wait = time.monotonic(), None
        with self.lock:
            for jid, deadline in self.deadlines.items():
                if jid == self.running and deadline <= now:
                    self._fence()
                if deadline > now and (wait is None or deadline - now < wait):
                    wait = deadline - now
        return wait

    def _read_loop(self) -> None:
        """Reader thread: queue jobs, move deadlines, fence when a deadline passes;
        the socket left to the main thread while it waits for a job (`_next`) and
        while the running job is young (`_turn_wait_s`)."""
        while True:
            turn = self.reader_turn
            if not turn.is_set() and not turn.wait(self._turn_wait_s()):
                continue
            with self.reading:
                if not self.reader_turn.is_set():
                    continue
                fds = [self.sock.fileno(), self.wake]
                readable, _, _ = select.select(fds, [], [], self._wait_s())
                if self.wake in readable:
                    os.eventfd_read(self.wake)  # the main thread wants the socket
                if fds[0] in readable and not self._read():
                    return

    def _turn_wait_s(self) -> float | None:
        """How long the reader thread waits for its turn before it looks again; it
        takes the turn itself once the running job has run READER_LAZY_S (0: read
        now), and waits to be woken (None) when no job came for READER_PARK_S.
        A running job's deadline is watched meanwhile (`_wait_s` fences)."""
        until_deadline = self._wait_s()
        now = time.monotonic()
        with self.lock:  # against _begin and _ended: a turn taken is for a job that runs
            if self.running is not None:
                left = self.started_at + READER_LAZY_S - now
                if left <= 0.0:
                    self.reader_turn.set()
                    return 0.0
                return left if until_deadline is None else min(left, until_deadline)
            if now - self.idle_since < READER_PARK_S:
                return READER_LAZY_S
            self.parked = True
            return None

    def _read(self, flags: int = 0) -> bool:
        """One read of the socket, its messages taken in (by the holder of `reading`);
        False at its end (the master is gone: None queued, the loop stops). With
        `flags` MSG_DONTWAIT, nothing to read is not an end."""
        try:
            data = self.sock.recv(65536, flags)
            messages = self.frames.feed(data) if data else []
        except BlockingIOError:
            return True
        except (OSError, ProtocolError):
            data, messages = b"", []
        if not data:
            self.inbox.put(None)
            return False
        for message in messages:
            self._on_message(message)
        return True

    def _next(self) -> protocol.Run | None:
        """The next job (None: stop). One already queued, else this thread reads the
        socket itself until one comes, the reader thread told to let go if it
        reads: nothing runs, so there is no deadline to watch, and the job starts as
        its message is read, not a thread hand-off later. The reader reads again
        once the job has run a while (`_turn_wait_s`)."""
        try:
            return self.inbox.get_nowait()
        except queue.Empty:
            pass
        if self.reader_turn.is_set():
            self.reader_turn.clear()
            if self.wake >= 0:  # the reader thread runs (serve)
                os.eventfd_write(self.wake, 1)
        with self.reading:  # what came meanwhile first: with nothing, the child is idle
            if self._read(socket.MSG_DONTWAIT) and self.inbox.empty():
                _title(self.settings, "idle")
            while self.inbox.empty() and self._read():
                pass
        return self.inbox.get()

    def _on_message(self, message: protocol.Message) -> None:
        if isinstance(message, protocol.Run):
            with self.lock:  # the deadline holds from now, not from when the job starts
                self.deadlines[message.jid] = message.deadline
            self.inbox.put(message)
        elif isinstance(message, protocol.Deadline):
            with self.lock:
                if message.jid in self.deadlines:
                    self.deadlines[message.jid] = message.deadline
        elif isinstance(message, protocol.Withdraw):
            with self.lock:
                taken = message.jid in self.deadlines and message.jid != self.running
                if taken:
                    del self.deadlines[message.jid]
                    self.withdrawn[message.jid] = self.withdrawn.get(message.jid, 0) + 1
            if taken:  # its end marker goes when its turn comes (_begin)
                self.send(protocol.Skipped(message.jid, "withdrawn"))
        elif isinstance(message, protocol.Stop):
            self.inbox.put(None)

    def _fence(self) -> None:
        sandbox.kill_leftovers()
        os._exit(ExitCode.FENCED)

    # --- the loop ---------------------------------------------------------------

    def serve(self) -> int:
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        threading.Thread(target=self._read_loop, name="runtime-child-reader", daemon=True).start()
        while True:
            run = self._next()
            if run is None:
                return ExitCode.STOPPED
            if self._begin(run):
                self.run_job(run)

    def _begin(self, run: protocol.Run) -> bool:
        """Marks the job running, unless it was withdrawn or its lease ran out meanwhile."""
        with self.lock:
            withdrawn = self.withdrawn.get(run.jid, 0)
            if withdrawn:  # its deadline went when it was taken back (a later Run's may be set)
                if withdrawn == 1:
                    del self.withdrawn[run.jid]
                else:
                    self.withdrawn[run.jid] = withdrawn - 1
            elif self.deadlines.get(run.jid, 0.0) > (now := time.monotonic()):
                self.running, self.started_at = run.jid, now
                if self.parked:  # no job for a while: the reader thread waits to be woken
                    self.parked = False
                    self.reader_turn.set()
                return True
            else:
                self.deadlines.pop(run.jid, None)
        joblog.end(run.jid)  # done with it: the next one's output follows
        if not withdrawn:  # a withdrawn one was said skipped when it was taken back
            self.send(protocol.Skipped(run.jid, "lease"))
        return False

    def run_job(self, run: protocol.Run) -> None:
        if run.start_at is not None:
            _wait_until(run.start_at)
        sandbox.limit_cpu_for_next_job(run.cpu_limit_s)
        _title(self.settings, f"jid={run.jid} klass={run.klass}")
        try:
            outcome, used = self.measured(run)
        except Terminated:
            joblog.end(run.jid)
            self.stop_tracing()
            self._clean_up()
            os._exit(ExitCode.TERMINATED)
        self._ended(run.jid)
        self.context_done()
        joblog.end(run.jid)  # all its output is on the pipe before its outcome goes
        outcome.cpu_s, outcome.max_rss_mb = round(used.cpu_s, 4), round(used.max_rss_mb, 1)
        outcome.rss_of_job = used.of_job
        self.send(outcome)
        self._clean_up()

    def _ended(self, jid: str) -> None:
        """The running job is over: its deadline goes, the reader thread's turn ends
        when the main thread reads next (`_next`)."""
        with self.lock:
            self.running = None
            self.deadlines.pop(jid, None)
            self.idle_since = time.monotonic()

    def measured(self, run: protocol.Run) -> tuple[protocol.Done | protocol.Failed, usage.Measured]:
        """The job's outcome and what it cost, in its span when tracing."""
        if self.tracing is None:
            self.meter.start()
            outcome = self.call(run)
            return outcome, self.meter.stop()
        with self.tracing.attempt(run) as span:
            self.meter.start()
            outcome = self.call(run)
            used = self.meter.stop()
            self.tracing.ended(span, outcome)
        return outcome, used

    def stop_tracing(self) -> None:
        """Exports the spans not yet exported (before the child exits)."""
        if self.tracing is not None:
            try:
                self.tracing.shutdown()
            except Exception:
                log.exception("spans not exported worker=%s", self.settings.worker)

    def call(self, run: protocol.Run) -> protocol.Done | protocol.Failed:
        try:
            fn = self.functions.get(run.klass) or allowlist.resolve(
                run.klass, self.settings.modules
            )
            self.functions[run.klass] = fn
        except KlassNotAllowed as err:
            return self._failed(run, FailureGroup.KLASS_NOT_ALLOWED, str(err), retry=False)
        except KlassNotFound as err:  # retried: a rolling deploy may not have reached this host
            message = f"{_format(err)}not importable on host {socket.gethostname()}: {err}"
            return self._failed(run, FailureGroup.KLASS_NOT_FOUND, message, error=err)
        self.context = context = JobContext(
            jid=run.jid,
            klass=run.klass,
            queue=run.queue,
            data=run.data,
            attempt=run.attempt,
            retries=run.retries,
            remaining=run.remaining,
            sandbox=self.settings.workdir,
            _send=self.send,
            _shard=self._shard_of(run.queue),
            _shards=self.shards,
            _batch=run.batch,
        )
        try:
            result = fn(context)
            if result is not None and inspect.isawaitable(result):
                result = _run_async(result)
        except Retry as retry:
            reason = retry.reason or f"the job asked for a retry (delay={retry.delay})"
            return self._failed(run, FailureGroup.RETRY, reason, delay=retry.delay)
        except Fail as fail:
            message = f"{fail.message}\n\n{_format(fail)}"
            return self._failed(run, fail.group, message, retry=False, error=fail)
        except Exception as err:  # noqa: BLE001 - the job boundary: any error is the job's outcome
            never = isinstance(err, getattr(fn, "never_retry", ()) or ())
            return self._failed(run, _class_path(err), _format(err), retry=not never, error=err)
        return done(run.jid, result)

    def context_done(self) -> None:
        """The job is over: what it said last (its progress) goes before its outcome."""
        if self.context is not None:
            self.context.flush()
            self.context = None

    def _failed(
        self,
        run: protocol.Run,
        group: str,
        message: str,
        *,
        retry: bool = True,
        delay: float | None = None,
        error: BaseException | None = None,
    ) -> protocol.Failed:
        if not retry or run.remaining <= 0:  # this failure is final: report it
            tags = {
                "queue": run.queue,
                "klass": run.klass,
                "jid": run.jid,
                "attempt": run.attempt,
                "worker": self.settings.worker,
            }
            if sentry.init(self.settings.sentry_dsn, server_name=self.settings.worker):
                sentry.report(group=group, message=message, tags=tags, error=error)
        return protocol.Failed(run.jid, group, message, retry=retry, delay=delay)

    def _clean_up(self) -> None:
        sandbox.kill_leftovers()
        self.workdir_seen = sandbox.empty_if_changed(self.settings.workdir, self.workdir_seen)


def _wait_until(monotonic_at: float) -> None:
    """Waits for a job's turn: sleeps, then spins the last SPIN_S (a sleeping CPU
    wakes a few hundred us late on some machines; the master sends the job only
    a couple of ms before its turn, so the spin is short and rare)."""
    while (left := monotonic_at - time.monotonic()) > SPIN_S:
        time.sleep(left - SPIN_S)
    while time.monotonic() < monotonic_at:
        pass


def _run_async(awaitable: Any) -> Any:
    async def main() -> Any:
        return await awaitable

    return uvloop.run(main())


def done(jid: str, result: Any) -> protocol.Done:
    """The outcome of a job that returned `result`: kept if it is JSON (None: no
    result), else the job is still complete and `note` says why nothing is kept."""
    if result is None:
        return protocol.Done(jid)
    try:
        text = json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as err:
        return protocol.Done(jid, note=f"result not kept: not JSON ({type(err).__name__}: {err})")
    if len(text) > RESULT_MAX_BYTES:
        return protocol.Done(jid, note=f"result not kept: {len(text)} bytes is over the limit")
    return protocol.Done(jid, result=text)


def _class_path(err: BaseException) -> str:
    cls = type(err)
    return f"{cls.__module__}.{cls.__qualname__}"


def _format(err: BaseException) -> str:
    return "".join(traceback.format_exception(err))


def _title(settings: Settings, state: str) -> None:
    set_title(f"runtime child {settings.index}: {state}")


def main(
    sock: socket.socket, settings: Settings, spec: sandbox.Spec, fork_point: protocol.Ready
) -> int:
    """Runs in the freshly forked child; returns its exit code (the caller _exits).
    `fork_point` describes the forking process (its pid is our parent's)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_term)
    try:
        sandbox.enter(spec, fork_point.pid)
        sandbox.become_subreaper()
        sandbox.empty(settings.workdir)  # then after every job
    except SandboxError as err:
        os.write(2, f"runtime child {settings.index}: {err}\n".encode())
        return ExitCode.SANDBOX
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    joblog.set_up_logging(settings.log_level)
    _title(settings, "idle")
    child = Child(sock, settings)
    try:
        ready = protocol.Ready(
            os.getpid(), fork_point.pid, fork_point.threads, fork_point.loop_running
        )
        child.send(ready)
        return child.serve()
    except (Terminated, BrokenPipeError, ConnectionResetError):
        return ExitCode.STOPPED
    finally:
        child.stop_tracing()
