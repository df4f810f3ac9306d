"""The master: one per worker host process. Leases jobs, runs them in children,
keeps the leases alive, reports every outcome. It never runs user code.

It is one loop over one book (book.py). Its sources — child sockets and the
fork server (processes.py), Redis calls, the blocking read for work, timers and
signals — only put events on one queue. Each pass of the loop applies the
events to the book, lets the book decide (`step`), and carries out the actions
that come out: messages and signals to children, forks, exchanges and renewals
with Redis. Redis calls run as tasks the loop owns; their results come back as
events, and a task that ends unexpectedly is logged and becomes a failure event
too, so nothing stops silently. Signal handlers only put an intent on the queue:

    TERM, INT  drain: stop leasing, let running jobs finish for the grace
               period, then kill the rest and give their jobs back; exit
    QUIT       finish: stop leasing, let running jobs finish; exit
    USR1       kill the running jobs' children (the jobs are retried)
    USR2       pause leasing            CONT   resume leasing
    HUP        replace every child with a fresh one from a new fork server
               (freshly imported code), each after its current job
    TTIN       one child more           TTOU   one child less

A master may serve queues of several namespaces of a sharded site (`shards`,
runtime.master.shards): one loop, one fork server, one set of children, and
one MasterClient for each namespace (its own connections, blocking read for
work, cancels and size watch). Every Redis action of the book names its shard;
the task that carries it out (remote.py, the master's side of Redis) uses that
shard's client and says the shard in the event it posts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import assert_never

from runtime import config, sentry
from runtime.errors import ConfigError, Error
from runtime.master import events
from runtime.master.book import Book
from runtime.master.notify import Notifier
from runtime.master.processes import Processes
from runtime.master.remote import Hooks, Remote
from runtime.master.status import Status

log = logging.getLogger(__name__)

SIGNALS = {
    signal.SIGTERM: events.Intent.DRAIN,
    signal.SIGINT: events.Intent.DRAIN,
    signal.SIGQUIT: events.Intent.FINISH,
    signal.SIGUSR1: events.Intent.KILL_JOBS,
    signal.SIGUSR2: events.Intent.PAUSE,
    signal.SIGCONT: events.Intent.RESUME,
    signal.SIGHUP: events.Intent.REPLACE,
    signal.SIGTTIN: events.Intent.GROW,
    signal.SIGTTOU: events.Intent.SHRINK,
}
READY_TIMEOUT_S = 60.0
SENTRY_FLUSH_S = 1.0  # at exit, the longest wait for unsent Sentry events
UNEXPECTED_LOG_EVERY_S = 60.0
MIN_PASS_S = 0.0005  # a pass that found nothing to do never comes round sooner


class Master:
    def __init__(
        self,
        settings: config.Settings,
        worker: config.WorkerSettings,
        url: str,
        worker_id: str,
        shards: list[tuple[str, tuple[str, ...]]] | None = None,
    ) -> None:
        """`shards`: (namespace, its queues) for each namespace served; None: the
        worker's queues in `settings.namespace`."""
        self.settings = settings
        self.worker = worker
        self.worker_id = worker_id
        served = shards or [(settings.namespace, worker.queues)]
        self.book = Book(worker, worker_id, shards=shards if len(served) > 1 else None)
        self.events: deque[events.Event] = deque()
        self.tasks: dict[str, asyncio.Task[None]] = {}  # every task the loop owns, by name
        links = [shard.link for shard in self.book.shards]
        hooks = Hooks(self.tasks, self.events, self.post, self._wake, self._run_pass, self._own)
        self.remote = Remote(settings, worker, url, worker_id, served, links, hooks)
        self.woken = asyncio.Event()
        self.processes = Processes(settings, worker, worker_id, self.post)
        self.notifier = Notifier()
        self.status = Status(self.notifier, worker_id)
        self.counter = 0
        self.unexpected: dict[str, tuple[float, int]] = {}  # task name -> (last logged, since)
        # the loop: a pass runs as a callback, soon after an event comes (one pass for
        # every event of the same turn of the event loop; some events may wait a
        # little for company: `post`'s within_s) or when the timer is due
        self.finished: asyncio.Future[None] | None = None  # set once the loop runs
        self.pass_soon = False
        self.timer: asyncio.Handle | None = None  # uvloop's has no when(): timer_at
        self.timer_at = 0.0

    def post(self, event: events.Event, within_s: float = 0.0) -> None:
        """What every source does: put an event on the queue and wake the loop (at
        once, or within `within_s`: a pass then takes the events that came meanwhile)."""
        self.events.append(event)
        if within_s > 0.0 and self.finished is not None:
            if not self.pass_soon:
                self._arm(within_s)
        elif self.finished is None:  # _wake, inline: every event comes this way
            self.woken.set()
        elif not self.pass_soon:
            self.pass_soon = True
            self.finished.get_loop().call_soon(self._run_pass)

    def _wake(self) -> None:
        if self.finished is None:  # still starting: _start waits on `woken`
            self.woken.set()
        elif not self.pass_soon:
            self.pass_soon = True
            self.finished.get_loop().call_soon(self._run_pass)

    # --- owned tasks ----------------------------------------------------------------

    def _own(
        self,
        name: str,
        work: Awaitable[None],
        on_error: Callable[[BaseException], events.Event | None] | None = None,
        *,
        reports: bool = False,
    ) -> None:
        """Runs `work` as a task the loop owns. If it raises, that is logged (one line,
        with the traceback for what is not a runtime error) and becomes an event.
        `reports`: the work posts an event whichever way it ends (or was cancelled by
        the book), so its end needs no pass of its own."""

        async def owned() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the boundary of an owned task
                if not isinstance(err, Error):
                    self._unexpected(name.split("#", maxsplit=1)[0], err)
                event = on_error(err) if on_error else None
                if event is not None:
                    self.post(event)

        # while the loop runs, its own (get_running_loop makes a getpid syscall)
        finished = self.finished
        if finished is not None and not finished.done():
            loop = finished.get_loop()
        else:
            loop = asyncio.get_running_loop()
        task = loop.create_task(owned(), name=name)
        self.tasks[name] = task
        task.add_done_callback(lambda t: self._disown(name, t, wake=not reports))

    def _unexpected(self, name: str, err: BaseException) -> None:
        """A task ended with an error runtime does not know: logged with its traceback
        once a minute per task, counted in between (a bug must not flood the log)."""
        now = time.monotonic()
        last, count = self.unexpected.get(name, (-UNEXPECTED_LOG_EVERY_S, 0))
        if now - last < UNEXPECTED_LOG_EVERY_S:
            self.unexpected[name] = (last, count + 1)
            return
        more = f" ({count} more times since the last line)" if count else ""
        log.error(
            "task %s ended unexpectedly%s worker=%s", name, more, self.worker_id, exc_info=err
        )
        self.unexpected[name] = (now, 0)

    def _event_failed(self, event: events.Event, err: Exception) -> None:
        """The book failed to take in an event (a bug): the event is skipped, and
        that is logged with its traceback once a minute per kind of event, counted
        in between, rather than stopping the master with its jobs leased."""
        kind = type(event).__name__
        now = time.monotonic()
        last, count = self.unexpected.get(f"event:{kind}", (-UNEXPECTED_LOG_EVERY_S, 0))
        if now - last < UNEXPECTED_LOG_EVERY_S:
            self.unexpected[f"event:{kind}"] = (last, count + 1)
            return
        more = f" ({count} more times since the last line)" if count else ""
        log.error(
            "unexpected %s taking in a %s event, skipped%s worker=%s",
            type(err).__name__,
            kind,
            more,
            self.worker_id,
            exc_info=err,
        )
        self.unexpected[f"event:{kind}"] = (now, 0)

    def _disown(self, name: str, task: asyncio.Task[None], wake: bool) -> None:
        if self.tasks.get(name) is task:
            del self.tasks[name]
        if wake:
            self._wake()

    def _unique(self, name: str) -> str:
        self.counter += 1
        return f"{name}#{self.counter}"

    # --- carrying out the book's actions ----------------------------------------------

    def _carry_out(self, actions: list[events.Action]) -> None:
        """Messages to children go first (a job for a child waits for nothing else),
        then the rest in order (Redis calls start as tasks)."""
        send, rest = self.processes.send, []
        for action in actions:
            if type(action) is events.Post:
                send(action.index, action.message)
            else:
                rest.append(action)
        if self.processes.dirty:
            self.processes.flush()
        for action in rest:
            self._do(action)

    def _do(self, action: events.Action) -> None:  # noqa: PLR0912 - a case an action
        """Carries out one action (mypy checks that every kind has its case)."""
        remote = self.remote
        match action:
            case events.Post():
                self.processes.send(action.index, action.message)
            case events.Exchange():
                name = remote.named("exchange", action.shard)
                fallback = remote.exchange_failed(action)
                self._own(name, remote.exchange(action), fallback, reports=True)
            case events.Renew():
                name = remote.named("renew", action.shard)
                self._own(name, remote.renew(action), remote.renew_failed(action), reports=True)
            case events.Kill():
                self.processes.kill(action.index, action.signal)
            case events.Spawn():
                self._own(self._unique("spawn"), self.processes.spawn(action.index))
            case events.Wait():
                shard = action.shard
                name = remote.named("wait", shard)
                self._own(name, remote.wait(shard), remote.wait_failed(shard), reports=True)
            case events.StopWaiting():
                self._cancel(remote.named("wait", action.shard))
            case events.GiveBack():
                giving = remote.clients[action.shard].give_back(action.key)
                self._own(self._unique("give-back"), giving)
            case events.ReplaceServer():
                self._own("replace", self._replace())
            case events.Extend():
                remote.extend_recurrence(action.low, action.shard)
            case events.Trim():
                remote.trim(action.shard)
            case events.Register():
                name = remote.named("register", action.shard)
                self._own(name, remote.register(action.concurrency, action.shard))
            case events.ReportFailure():  # never waits for Sentry: leases must go on
                sentry.report(
                    group=action.group, message=action.message, tags=action.tags, flush_s=None
                )
            case _:
                assert_never(action)

    def _cancel(self, name: str) -> None:
        if (task := self.tasks.get(name)) is not None:
            task.cancel()

    async def _replace(self) -> None:
        try:
            generation = await self.processes.replace()
        except Error as err:  # HUP: the old one stays; a dead one: spawns fail (logged)
            log.error("could not start a new fork server: %s worker=%s", err, self.worker_id)
            return
        self.post(events.ServerReplaced(generation))

    # --- the loop -------------------------------------------------------------------

    def _pass(self) -> bool:
        """Applies the queued events, decides, carries out; True if anything happened."""
        now = time.monotonic()
        busy = bool(self.events)
        while self.events:
            event = self.events.popleft()
            try:
                self.book.apply(event, now)
            except Exception as err:  # noqa: BLE001 - one event's bug never stops the master
                self._event_failed(event, err)
        first = self.book.start_jobs(now)  # a job for an idle child goes first (one send a child)
        if first:
            self._carry_out(first)
        self.processes.check_frames(now)
        wanted = self.book.rss_wanted(now)
        if wanted:
            self.book.apply(events.Rss(self.processes.rss(wanted)), now)
        self.book.step(now)
        actions = self.book.take_actions()
        if actions:
            self._carry_out(actions)
        self.remote.watch_sizes()
        self.remote.watch_cancels()
        self.status.show(self.book.describe, now)
        return busy or bool(actions)

    async def _loop(self) -> None:
        """Runs passes until the book is done: as callbacks (no task switch per pass)."""
        self.finished = asyncio.get_running_loop().create_future()
        self.remote.running = True
        self._run_pass()
        try:
            await self.finished
        finally:
            if self.timer is not None:
                self.timer.cancel()

    def _run_pass(self) -> None:
        self.pass_soon = False
        finished = self.finished
        if finished is None or finished.done():
            return
        try:
            active = self._pass()
            now = time.monotonic()
            if self.book.done(now):
                finished.set_result(None)
            elif self.events:
                self._wake()
            else:
                self._arm(self._next_pass_in(now, active))
        except Exception as err:  # ends the loop the way a raise in it would
            log.error("the master's loop failed worker=%s", self.worker_id, exc_info=err)
            finished.set_exception(err)

    def _next_pass_in(self, now: float, active: bool) -> float | None:
        wait, due = self.book.next_wake(now), self.status.next_due(now)  # every pass: no
        if wait is None or (due is not None and due < wait):  # list, min() or max()
            wait = due
        if wait is None:
            return None
        return wait if active or wait > MIN_PASS_S else MIN_PASS_S

    def _arm(self, timeout: float | None) -> None:
        """The timer for the next pass that no event asks for (kept if it is due in
        time: an early pass costs less than a timer made for every pass)."""
        if timeout is None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            return
        assert self.finished is not None  # the loop runs
        loop = self.finished.get_loop()
        now = loop.time()
        at = now + timeout
        if self.timer is not None:
            if now <= self.timer_at <= at:
                return
            self.timer.cancel()
        self.timer, self.timer_at = loop.call_at(at, self._on_timer), at

    def _on_timer(self) -> None:
        self.timer = None
        self._run_pass()

    async def _start(self) -> None:
        """Reaches Redis (every namespace's) and starts the children; returns once
        they are ready."""
        await self.remote.connect()
        self.remote.watch_cancels()  # subscribed while the children start, before READY
        await self.processes.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.book.ready():
            if self.book.start_failure is not None:
                raise ConfigError(f"children cannot start: {self.book.start_failure}")
            if time.monotonic() > deadline:
                raise Error("children did not start in time")
            self.book.step(time.monotonic())
            self._carry_out(self.book.take_actions())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), 0.05)
            self.woken.clear()
            now = time.monotonic()
            while self.events:
                self.book.apply(self.events.popleft(), now)

    async def run(self) -> int:
        """Runs until a stop signal; returns the process exit code."""
        loop = asyncio.get_running_loop()
        for sig, intent in SIGNALS.items():
            loop.add_signal_handler(sig, self.post, events.Signalled(intent))
        sentry.init(self.settings.sentry_dsn, server_name=self.worker_id)
        started = False
        try:
            await self._start()
            started = True
            log.info(
                "master ready queues=%s children=%d worker=%s",
                ",".join(self.worker.queues),
                len(self.book.slots),
                self.worker_id,
            )
            self.notifier.ready(self.book.describe())
            gc.freeze()  # what start-up made stays: a full collection never walks it again
            await self._loop()
        finally:
            self.notifier.stopping("stopping")
            await self._shut_down(started)
        return 0

    async def _shut_down(self, started: bool) -> None:
        """Stops everything; a master that never started says nothing of it (the
        reason it did not start is the one line the CLI prints)."""
        for task in list(self.tasks.values()):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await self.processes.close()
        if sentry.enabled():  # events not sent yet: a bounded wait, off the loop
            await asyncio.to_thread(sentry.flush, SENTRY_FLUSH_S)
        await self.remote.say_goodbye()
        log.log(
            logging.INFO if started else logging.DEBUG, "master stopped worker=%s", self.worker_id
        )
