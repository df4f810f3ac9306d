"""One synchronous connection to a deployment: the URL (or the embedded server),
the namespace's keys, and running Calls (runtime.queue.ops) with their failures
classified (runtime.queue.faults) and, for calls safe to repeat, retried.

Retries: a call marked `repeatable` that meets a `RedisTransient` (connection
lost, timeout, BUSY, LOADING, READONLY, OOM ...) is sent again after a capped,
jittered backoff, for at most `retry_for_s` seconds in all; then the error is
raised. Other calls raise at once. `Client` and its parts (runtime.queue.api.admin,
scheduling, holder) share one `Connection`.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, Self, TypeVar

import redis
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from runtime import config
from runtime.errors import ConfigError, Error, RedisTransient, WrongState
from runtime.queue import embedded, ops, routing, scripts, urls, waiting
from runtime.queue.faults import classify, redact
from runtime.queue.keys import Keys
from runtime.queue.ops import Call
from runtime.queue.shards import Shards

T = TypeVar("T")
log = logging.getLogger(__name__)

RETRY_FOR_S = 2.0  # how long a repeatable call is retried through a transient failure
BACKOFF_FIRST_S = 0.05
BACKOFF_CAP_S = 0.5
SOCKET_TIMEOUT_S = 10.0  # no answer to a command within this: the connection is lost
CONNECT_TIMEOUT_S = 5.0


def default_worker_id() -> str:
    """`hostname-pid`: unique per running process."""
    return f"{socket.gethostname()}-{os.getpid()}"


def resolve_url(settings: config.Settings) -> str:
    """The configured URL, else the embedded server's (started if needed). Inside
    a worker's child (config.CHILD_MARKER) there is no embedded server to use:
    WrongState, rather than a second Redis started where the job's puts would
    be stranded."""
    if settings.url:
        return settings.url
    if os.environ.get(config.CHILD_MARKER) == "1":
        raise WrongState(
            "inside a job there is no Redis URL (a job holds no credentials): put "
            "follow-up jobs with ctx.put(...), they go through the worker"
        )
    return embedded.ensure(settings.state_dir)


@cache
def driver_options() -> dict[str, Any]:
    """What a connection tells the server of its library, worked out once:
    redis-py 8 reads its own version from the package's metadata for every new
    connection (milliseconds of CPU each; in the event loop, for asyncio)
    unless it is given a `driver_info`. Earlier versions read it once."""
    try:
        from redis.driver_info import DriverInfo  # noqa: PLC0415 - redis-py >= 8 only
    except ImportError:
        return {}
    return {"driver_info": DriverInfo()}


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client that never retries on its own (retries are ours, and only
    for calls safe to repeat) and never waits forever for an answer. For a
    Sentinel URL, a client of the service's primary (found again on every new
    connection); for a Cluster URL, of its first node (see runtime.queue.routing)."""
    options = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
        **driver_options(),
        **kwargs,
    }
    target = urls.parse(url)
    try:
        if target.kind == "sentinel":
            return _sentinel_primary(target, options)
        if target.kind == "cluster":
            url = target.node_url(target.seeds[0])
        return redis.Redis.from_url(url, **options)
    except ValueError as err:
        raise ConfigError(f"bad Redis URL {redact(url)}: {redact(str(err))}") from err


def _sentinel_primary(target: urls.Target, options: dict[str, Any]) -> redis.Redis:
    """A client whose pool asks the sentinels where the primary is (redis-py's
    Sentinel, SentinelConnectionPool)."""
    sentinels = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.seeds), sentinel_kwargs=sentinel_options(target, options)
    )
    primary: redis.Redis = sentinels.master_for(  # type: ignore[no-untyped-call]
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        **options,
    )
    return primary


def sentinel_options(target: urls.Target, options: dict[str, Any]) -> dict[str, Any]:
    """How to talk to the sentinels themselves: the same timeouts, their own
    credentials, no retries (the next sentinel is asked instead)."""
    mine = {k: v for k, v in options.items() if k.startswith("socket_") or k == "retry"}
    if target.sentinel_password:
        mine["password"] = target.sentinel_password
        mine["username"] = target.sentinel_username
    return mine


def backoff_s(attempt: int) -> float:
    """The pause before try `attempt` + 1: doubling from BACKOFF_FIRST_S up to
    BACKOFF_CAP_S, jittered into its upper half (clients retry out of step)."""
    ceiling: float = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2.0**attempt)
    return ceiling * random.uniform(0.5, 1.0)


def retry_pause(
    err: RedisTransient, calls: Sequence[Call[Any]], attempt: int, deadline: float
) -> float:
    """The pause before sending `calls` again after `err` on try `attempt` + 1
    (backoff_s); raises `err` when one of them is not safe to repeat or the
    pause would end past `deadline` (monotonic). Both drivers' retries."""
    pause = backoff_s(attempt)
    if not all(c.repeatable for c in calls) or time.monotonic() + pause > deadline:
        raise err
    log.debug("%s; trying %s again in %.2f s", err, calls[0].name, pause)
    return pause


class Connection:
    """A connection to one deployment (a namespace in one Redis): its URL, settings
    and keys, and the running of calls (`call`, `calls`; `run` and `run_json` for
    tests and tools)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        retry_for_s: float = RETRY_FOR_S,
        **redis_kwargs: Any,
    ) -> None:
        if settings is None:
            settings = config.load_settings({"url": url, "namespace": namespace})
        self.settings = settings
        self.url = resolve_url(settings)
        self.keys = Keys(settings.namespace)
        self.shards = Shards.of(settings)  # what lives in this namespace, of a sharded site
        self.retry_for_s = retry_for_s
        self.session = scripts.Session(self.url, self.keys.root)
        self.route = routing.Route.of(self.url)
        self.redis_kwargs = redis_kwargs
        self.nodes: dict[str, redis.Redis] = {}  # a cluster's nodes reached so far, by URL
        self.redis = connect(self.route.url, **redis_kwargs)
        self.nodes[self.route.url] = self.redis
        # One server (no Sentinel, no Cluster): calls skip the routing steps and
        # keep their connections between calls (`_take`, `_give`).
        self._plain = self.route.target.kind == "server"
        self._spare: list[redis.connection.Connection] = []
        self._pid = os.getpid()

    @classmethod
    def from_url(cls, url: str, namespace: str | None = None, **redis_kwargs: Any) -> Self:
        return cls(url, namespace=namespace, **redis_kwargs)

    def close(self) -> None:
        if self._pid == os.getpid():
            while self._spare:
                self.redis.connection_pool.release(self._spare.pop())
        for node in {id(c): c for c in [self.redis, *self.nodes.values()]}.values():
            node.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- running calls ------------------------------------------------------------

    def call(self, call: Call[T], landed: Callable[[Error], T | None] | None = None) -> T:
        """Runs one call. `landed`: after a retry failed with an Error, says whether
        an earlier try did what was asked (its result), None if not."""
        value: T = self.calls([call], landed)[0]
        return value

    def calls(
        self, calls: Sequence[Call[Any]], landed: Callable[[Error], Any] | None = None
    ) -> list[Any]:
        """Runs calls in one round trip; their results in order, or the first error
        raised. Retried through transient failures when every call is repeatable."""
        deadline = time.monotonic() + self.retry_for_s
        attempt = 0
        while True:
            try:
                return _values(self._drive(scripts.run(self.session, calls)))
            except RedisTransient as err:
                pause = retry_pause(err, calls, attempt, deadline)
            except Error as err:
                found = landed(err) if attempt and landed is not None else None
                if found is None:
                    raise
                return [found]
            time.sleep(pause)
            attempt += 1

    def steps(self, plan: waiting.Steps) -> Any:
        """Drives a plan of round trips (runtime.queue.waiting) to its end, each
        round trip run by `calls`."""
        try:
            request = next(plan)
            while True:
                request = plan.send(self.calls(request))
        except StopIteration as done:
            return done.value

    def _drive(self, plan: scripts.Plan[T]) -> T:
        """Carries out a plan's round trips on one pooled connection (of the node
        that owns the namespace's slot, for a cluster: MOVED is followed)."""
        pool = self.redis.connection_pool
        conn: redis.connection.AbstractConnection | None
        conn = self._take(pool)
        try:
            request = next(plan)
            while True:
                if self._plain:  # nothing to route: no probe, no MOVED, no stale primary
                    request = plan.send(_round_trip(conn, request))
                    continue
                sent = routing.probed(self.route.target, request)
                replies = routing.checked(sent, request, _round_trip(conn, sent))
                for _ in range(routing.MAX_REDIRECTS):
                    if not routing.follows(self.route, replies):
                        break
                    pool.release(conn)
                    conn = None
                    pool = self._reroute().connection_pool
                    conn = pool.get_connection()
                    redo = routing.redirected(replies)
                    again = _round_trip(conn, [request[i] for i in redo])
                    for i, reply in zip(redo, again, strict=True):
                        replies[i] = reply
                if routing.stale(self.route.target, replies):
                    conn.disconnect()  # type: ignore[no-untyped-call]  # ask the sentinels again
                request = plan.send(replies)
        except StopIteration as done:
            value: T = done.value
            return value
        except BaseException as err:
            if conn is not None and not isinstance(err, Error):  # replies may be unread
                conn.disconnect()  # type: ignore[no-untyped-call]
            if isinstance(err, redis.RedisError | OSError):
                self._lost(err)
                raise classify(err, self.url) from err
            raise
        finally:
            if conn is not None:
                self._give(pool, conn)

    def _take(self, pool: redis.ConnectionPool) -> redis.connection.Connection:
        """A connection for one call (errors classified): for one server, one this
        client kept from an earlier call, checked as the pool checks the ones it
        hands out (the pool's own bookkeeping costs as much as a put's round
        trip); else the pool's."""
        try:
            return self._kept(pool) or pool.get_connection()
        except (redis.RedisError, OSError) as err:
            self._lost(err)
            raise classify(err, self.url) from err

    def _kept(self, pool: redis.ConnectionPool) -> redis.connection.Connection | None:
        if not (self._plain and self._spare and self._pid == os.getpid()):
            return None
        try:
            conn = self._spare.pop()  # atomic: threads never share one
        except IndexError:  # another thread took the last one
            return None
        try:
            try:
                if conn.can_read():  # unread data, or the server closed it
                    raise redis.ConnectionError("Connection has data")
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                conn.disconnect()  # type: ignore[no-untyped-call]
                conn.connect()  # type: ignore[no-untyped-call]
                if conn.can_read():
                    raise redis.ConnectionError("Connection not ready") from None
        except BaseException:
            pool.release(conn)
            raise
        return conn

    def _give(self, pool: redis.ConnectionPool, conn: redis.connection.Connection) -> None:
        """After a call: one server's connection is kept for the next call (in this
        process), any other goes back to its pool."""
        if self._plain and self._pid == os.getpid():
            self._spare.append(conn)
        else:
            pool.release(conn)

    def _reroute(self) -> redis.Redis:
        """The client of the node the route names now (made on first use)."""
        if self.route.url not in self.nodes:
            self.nodes[self.route.url] = connect(self.route.url, **self.redis_kwargs)
        self.redis = self.nodes[self.route.url]
        return self.redis

    def _lost(self, err: BaseException) -> None:
        """A cluster node out of reach: the next call starts from the next seed."""
        link = redis.ConnectionError | redis.TimeoutError | OSError
        if isinstance(err, link) and self.route.lost():
            self._reroute()

    @contextmanager
    def reaching(self) -> Iterator[None]:
        """For the few things that use redis-py directly (pub/sub): its errors classified."""
        try:
            yield
        except (redis.RedisError, OSError) as err:
            raise classify(err, self.url) from err

    def run(self, operation: str, *args: Any) -> Any:
        """Runs operation lua/<operation>.lua; its reply as Redis sent it (not retried)."""
        return self.call(ops.raw(operation, *args))

    def run_json(self, operation: str, *args: Any) -> Any:
        return self.call(ops.Call(operation, args, ops.read_json))

    def now_ms(self) -> int:
        """The deployment's time (Redis TIME), in ms: schedules never use ours."""
        return self.call(ops.now())


def _round_trip(conn: redis.connection.AbstractConnection, request: list[Any]) -> list[Any]:
    """Sends a round trip's commands; their replies (error replies as exceptions)."""
    conn.send_packed_command([scripts.pack(request)], check_health=False)  # type: ignore[no-untyped-call]
    return [_read(conn) for _ in request]


def _read(conn: redis.connection.AbstractConnection) -> Any:
    """One reply; an error reply as its exception (the stream stays in step)."""
    try:
        return conn.read_response()
    except redis.ResponseError as err:
        return err


def _values(results: list[Any]) -> list[Any]:
    for value in results:
        if isinstance(value, Error):
            raise value
    return results
