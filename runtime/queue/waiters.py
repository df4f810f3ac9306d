"""The waits of one asyncio connection on one blocking read (runtime.queue.adriver).

A wait (runtime.queue.waiting) blocks on its job's wake-up list between two
reads of the job. Driven as the synchronous Client drives it, every waiting
coroutine would hold a connection of its own in a BLPOP: a thousand waits, a
thousand connections, each one made (connect, handshake) while the event
loop waits on it. Here the waits of a connection share one read: a `Waiter`
keeps one BLPOP on every list waited on, plus a list of its own (`wake_key`);
a wait that joins while that BLPOP blocks without its list pushes a token
there (one at a time), so the BLPOP starts again with the new list in it.

A token popped from a job's list wakes every wait on that list; each reads
the job again (a token left over, or one meant for a wait that left, costs
one more read, never a wrong answer). Tokens stay on their list until
popped, so a job that ends before its list is listened to is not missed.

The BLPOP is a call like any other (`calls`: retried through a passing
failure, classified); an error it ends with is raised in every wait it
served. When no wait is left the waiter stops: a BLPOP in flight is
cancelled and its connection dropped (the server ends its side at once), so
cancelled waits leave no connection behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from runtime.errors import Error, WrongState
from runtime.queue import ops, waiting
from runtime.queue.ops import Call

log = logging.getLogger(__name__)

Calls = Callable[[Sequence[Call[Any]]], Awaitable[list[Any]]]


class Waiter:
    """One BLPOP serving every wait of a connection (`pop`)."""

    def __init__(self, blocking: Calls, calls: Calls, wake_key: str) -> None:
        self._blocking = blocking  # runs the BLPOP (on a connection of its own)
        self._calls = calls  # runs the nudge (as any call)
        self.wake_key = wake_key  # this waiter's own list: a joining wait's token
        self.waits: dict[str, list[asyncio.Future[str | None]]] = {}  # by wake-up list
        self._task: asyncio.Task[None] | None = None  # the BLPOP's loop (_run)
        self._listening: frozenset[str] = frozenset()  # the lists of the BLPOP in flight
        self._nudging: asyncio.Task[None] | None = None  # a token on wake_key, on its way

    async def pop(self, key: str, timeout_s: float) -> str | None:
        """BLPOP `key` `timeout_s`, shared: the token that woke the waits on `key`
        (how the job ended), None when `timeout_s` passed first."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[str | None] = loop.create_future()
        self.waits.setdefault(key, []).append(woken)
        timer = loop.call_later(timeout_s, _settle, woken, None)
        self._listen(key)
        try:
            return await woken
        finally:
            timer.cancel()
            self._leave(key, woken)

    async def aclose(self) -> None:
        """Stops the BLPOP; the waits still on it raise WrongState."""
        tasks = (self._task, self._nudging)
        self._fail(WrongState("the client was closed while waiting"))
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Error):
                    await task
        self._task = self._nudging = None

    def _listen(self, key: str) -> None:
        """Makes sure a BLPOP will listen to `key`: the next one (started now when
        none runs), or the one in flight once a token on wake_key restarts it."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        elif self._listening and key not in self._listening and self._nudging is None:
            self._nudging = asyncio.create_task(self._nudge())

    def _leave(self, key: str, woken: asyncio.Future[str | None]) -> None:
        """A wait is over (woken, timed out or cancelled); the last one stops the
        BLPOP (its connection dropped: its reply is never read)."""
        mine = self.waits.get(key)
        if mine is not None and woken in mine:
            mine.remove(woken)
            if not mine:
                del self.waits[key]
        if not self.waits and self._task is not None:
            self._task.cancel()
            self._task = None
            self._listening = frozenset()

    async def _run(self) -> None:
        """BLPOPs on every list waited on, a slice at a time, while waits remain."""
        me = asyncio.current_task()
        while self.waits and self._task is me:
            keys = [self.wake_key, *self.waits]
            self._listening = frozenset(keys)
            try:
                [got] = await self._blocking([ops.wait_for_ends(keys, waiting.WAIT_SLICE_S)])
            except Error as err:
                self._fail(err)
                return
            finally:
                if self._task is me:
                    self._listening = frozenset()
            if got is not None and got[0] != self.wake_key:
                for woken in self.waits.pop(got[0], []):
                    _settle(woken, got[1])
        if self._task is me:
            self._task = None

    def _fail(self, err: Error) -> None:
        """The BLPOP failed for good: every wait it served raises `err`."""
        waits, self.waits = self.waits, {}
        self._task, self._listening = None, frozenset()
        for mine in waits.values():
            for woken in mine:
                if not woken.done():
                    woken.set_exception(err)

    async def _nudge(self) -> None:
        """A token on wake_key: the BLPOP in flight answers and starts again with
        the lists joined since (a lost token: they are listened to at the next
        slice, at most WAIT_SLICE_S later)."""
        try:
            await self._calls(ops.wake_waiter(self.wake_key, waiting.WAIT_SLICE_S))
        except Error as err:
            log.debug("the waiter's wake-up token was not pushed: %s", err)
        finally:
            self._nudging = None


def _settle(woken: asyncio.Future[str | None], token: str | None) -> None:
    if not woken.done():
        woken.set_result(token)
