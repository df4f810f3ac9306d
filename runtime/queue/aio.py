"""The asyncio client of a master: the operations it runs, batched.

One `exchange` sends everything the master has to say in one round trip: the
completions, retries, failures and releases it collected, then a pop for its
free children, pipelined. Idle masters block on their queues' wake-up lists
(BLPOP on a connection of its own) instead of polling.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from runtime.errors import Error
from runtime.queue import recur, scripts, wire
from runtime.queue.client import text
from runtime.queue.keys import Keys


@dataclass(frozen=True)
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

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Leased:
        meta = reply["meta"]
        return cls(
            jid=reply["jid"], token=meta["l"], klass=meta["k"], queue=meta["q"],
            data=reply["data"], attempt=int(meta.get("a", 1)), retries=int(meta["r"]),
            remaining=int(meta["m"]), lease_s=reply["lease_ms"] / 1000,
            timeout_s=float(reply["timeout_s"]),
            start_in_s=reply["start_in_us"] / 1e6 if "start_in_us" in reply else None,
            expires_us=reply.get("expires_us"), handed=bool(reply.get("handed")),
        )  # fmt: skip


@dataclass
class Outcomes:
    """Reports collected by a master, sent together by the next exchange."""

    complete: dict[str, str] = field(default_factory=dict)  # jid -> token
    retry: list[tuple[str, str, str, str, int]] = field(default_factory=list)
    fail: list[tuple[str, str, str, str]] = field(default_factory=list)
    release: dict[str, str] = field(default_factory=dict)
    since: float | None = None  # monotonic time the oldest of them was recorded

    def __len__(self) -> int:
        return len(self.complete) + len(self.retry) + len(self.fail) + len(self.release)

    def _noted(self) -> None:
        if self.since is None:
            self.since = time.monotonic()

    def add_complete(self, jid: str, token: str) -> None:
        self.complete[jid] = token
        self._noted()

    def add_retry(self, jid: str, token: str, group: str, message: str, delay_ms: int) -> None:
        self.retry.append((jid, token, group, message, delay_ms))
        self._noted()

    def add_fail(self, jid: str, token: str, group: str, message: str) -> None:
        self.fail.append((jid, token, group, message))
        self._noted()

    def add_release(self, jid: str, token: str) -> None:
        self.release[jid] = token
        self._noted()

    def take(self) -> Outcomes:
        """These outcomes, leaving this collection empty."""
        taken = Outcomes(self.complete, self.retry, self.fail, self.release, self.since)
        self.complete, self.retry, self.fail, self.release = {}, [], [], {}
        self.since = None
        return taken

    def merge(self, older: Outcomes) -> None:
        """Puts back outcomes that could not be sent, ahead of newer ones."""
        self.complete = {**older.complete, **self.complete}
        self.retry[:0] = older.retry
        self.fail[:0] = older.fail
        self.release = {**older.release, **self.release}
        if older.since is not None:
            self.since = older.since

    def calls(self, worker: str) -> list[tuple[str, list[Any]]]:
        out: list[tuple[str, list[Any]]] = []
        if self.complete:
            out.append(
                ("complete", [worker, *_flat((j, t, "{}") for j, t in self.complete.items())])
            )
        if self.retry:
            out.append(("retry", [worker, *_flat(self.retry)]))
        if self.fail:
            out.append(("fail", [worker, *_flat(self.fail)]))
        if self.release:
            out.append(("release", [worker, *_flat(self.release.items())]))
        return out


def _flat(rows: Any) -> list[Any]:
    return [value for row in rows for value in row]


@dataclass(frozen=True)
class Popped:
    jobs: list[Leased]
    wake_in_s: float | None  # None: nothing comes due, or the pop was full
    refill: list[dict[str, Any]] = field(default_factory=list)  # cron recurrences low on ticks
    now_us: int | None = None  # Redis's clock when the pop ran


class AsyncClient:
    """A master's connection to its deployment."""

    def __init__(self, url: str, keys: Keys, worker: str) -> None:
        self.url = url
        self.keys = keys
        self.worker = worker
        self.redis: redis.asyncio.Redis = redis.asyncio.Redis.from_url(url)
        self.blocking: redis.asyncio.Redis = redis.asyncio.Redis.from_url(url, socket_timeout=None)
        self.functions = True  # FCALL until load_scripts finds otherwise

    async def close(self) -> None:
        await self.redis.aclose()
        await self.blocking.aclose()

    async def load_scripts(self) -> None:
        """Loads the function library (or, without FCALL, every script) once."""
        self.functions = await scripts.aprepare(self.redis)

    async def _pipeline(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        """Runs the calls in one round trip; reloads scripts the server forgot."""
        root = [self.keys.root]
        pipe = self.redis.pipeline(transaction=False)
        for name, args in calls:
            scripts.queue_call(pipe, name, root, args, self.functions)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        for i, (name, args) in enumerate(calls):
            result = results[i]
            if scripts.needs_loading(result):  # the server lost them (restart, flush)
                results[i] = await scripts.acall(self.redis, name, root, args)
                self.functions = scripts.uses_functions(self.redis)
            elif isinstance(result, redis.exceptions.ResponseError):
                raise scripts.translate(name, result)
            elif isinstance(result, Exception):
                raise result
        return results

    async def exchange(
        self,
        outcomes: Outcomes,
        pop_count: int | None,
        queues: list[str],
        order: str,
        ahead_s: float = 0.0,
    ) -> tuple[dict[str, str | Error], Popped | None]:
        """Sends the outcomes, then pops up to `pop_count` jobs (None: no pop; 0: only
        learn when something comes due; jobs whose turn comes within `ahead_s` too),
        in one round trip."""
        calls = outcomes.calls(self.worker)
        if pop_count is not None and queues:
            ahead_us = round(ahead_s * 1e6)
            pop = [self.worker, pop_count, wire.seed(), order, ahead_us, 1, *queues]
            calls.append(("pop", pop))
        if not calls:
            return {}, None
        results = await self._pipeline(calls)
        states: dict[str, str | Error] = {}
        popped = None
        for (name, _), result in zip(calls, results, strict=True):
            reply = json.loads(result)
            if name == "pop":
                wake = reply["wake_in_ms"]
                popped = Popped(
                    [Leased.from_reply(j) for j in reply["jobs"]],
                    None if wake < 0 else wake / 1000,
                    reply.get("refill", []),
                    reply.get("now_us"),
                )
            else:
                states.update(wire.outcomes(reply))
        return states, popped

    async def extend_recurrence(self, id: str, cron: str, tz: str, after_ms: int) -> int:
        """Adds the next ticks of a cron recurrence (computed here: the scripts cannot)."""
        ticks = recur.cron_ticks(cron, tz, after_ms)
        [added] = await self._pipeline([("recur_ticks", [id, cron, *ticks])])
        return int(added)

    async def counts(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        [reply] = await self._pipeline([("counts", list(queues))])
        counts: dict[str, dict[str, Any]] = json.loads(reply)
        return counts

    async def heartbeat(self, leases: dict[str, str]) -> set[str]:
        """Renews the leases {jid: token}; returns the jids whose lease is lost."""
        if not leases:
            return set()
        args = [self.worker, *_flat(leases.items())]
        [reply] = await self._pipeline([("heartbeat", args)])
        return set(json.loads(reply)["lost"])

    async def wait_for_work(self, queues: list[str], timeout_s: float) -> tuple[str, bytes] | None:
        """Blocks until something arrives for this master: a queue's wake-up token,
        or on its own list a job handed to it (handoff.lua) or a token. Returns
        (the key, the value), None on timeout."""
        keys = [self.keys.wake(q) for q in queues] + [self.keys.worker_wake(self.worker)]
        got = await self.blocking.blpop(keys, timeout=timeout_s)
        if got is None:
            return None
        value = got[1] if isinstance(got[1], bytes) else str(got[1]).encode()
        return text(got[0]), value

    async def give_back(self, key: str) -> None:
        """Puts back a wake-up token this master cannot use (at most one per key)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(key, "1")
        pipe.ltrim(key, 0, 0)
        await pipe.execute()

    async def forget(self, queues: list[str]) -> int:
        """Says goodbye: stops waiting on `queues`, gives back jobs handed to this
        master but never taken; returns how many leases it still holds."""
        [held] = await self._pipeline([("forget_worker", [self.worker, *queues])])
        await self.redis.delete(self.keys.worker_wake(self.worker))
        return int(held)

    async def ping(self) -> None:
        await self.redis.ping()
