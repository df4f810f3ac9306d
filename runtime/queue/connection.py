"""One synchronous connection to a deployment: the URL (or the embedded server),
the namespace's keys, and running Calls (runtime.queue.ops) with their failures
classified (runtime.queue.faults) and, for calls safe to repeat, retried.

Retries: a call marked `repeatable` that meets a `RedisTransient` (connection
lost, timeout, BUSY, LOADING, READONLY, OOM ...) is sent again after a capped,
jittered backoff, for at most `retry_for_s` seconds in all; then the error is
raised. Other calls raise at once. `Client` builds its operations on this.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from runtime import config
from runtime.errors import ConfigError, Error, RedisTransient, WrongState
from runtime.queue import embedded, ops, scripts
from runtime.queue.faults import classify, redact
from runtime.queue.keys import Keys
from runtime.queue.ops import Call, text

T = TypeVar("T")
log = logging.getLogger(__name__)

RETRY_FOR_S = 2.0  # how long a repeatable call is retried through a transient failure
BACKOFF_FIRST_S = 0.05
BACKOFF_CAP_S = 0.5
SOCKET_TIMEOUT_S = 10.0  # no answer to a command within this: the connection is lost
CONNECT_TIMEOUT_S = 5.0

__all__ = ["Connection", "default_worker_id", "redact", "resolve_url", "text"]


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


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client that never retries on its own (retries are ours, and only
    for calls safe to repeat) and never waits forever for an answer."""
    options = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S,
               "retry": Retry(NoBackoff(), 0), **kwargs}  # fmt: skip
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as err:
        raise ConfigError(f"bad Redis URL {redact(url)}: {redact(str(err))}") from err


def backoff_s(attempt: int) -> float:
    """The pause before try `attempt` + 1: doubling from BACKOFF_FIRST_S up to
    BACKOFF_CAP_S, jittered into its upper half (clients retry out of step)."""
    ceiling: float = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2.0**attempt)
    return ceiling * random.uniform(0.5, 1.0)


class Connection:
    """A connection to one deployment (a namespace in one Redis)."""

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
        self.retry_for_s = retry_for_s
        self.session = scripts.Session(self.url, self.keys.root)
        self.redis = connect(self.url, **redis_kwargs)

    @classmethod
    def from_url(cls, url: str, namespace: str | None = None, **redis_kwargs: Any) -> Self:
        return cls(url, namespace=namespace, **redis_kwargs)

    def close(self) -> None:
        self.redis.close()

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
                pause = backoff_s(attempt)
                repeatable = all(c.repeatable for c in calls)
                if not repeatable or time.monotonic() + pause > deadline:
                    raise
                log.debug("%s; trying %s again in %.2f s", err, calls[0].name, pause)
            except Error as err:
                found = landed(err) if attempt and landed is not None else None
                if found is None:
                    raise
                return [found]
            time.sleep(pause)
            attempt += 1

    def _drive(self, plan: scripts.Plan[T]) -> T:
        """Carries out a plan's round trips on one pooled connection."""
        pool = self.redis.connection_pool
        try:
            conn = pool.get_connection()
        except (redis.RedisError, OSError) as err:
            raise classify(err, self.url) from err
        try:
            request = next(plan)
            while True:
                packed = [scripts.pack(request)]
                conn.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
                request = plan.send([_read(conn) for _ in request])
        except StopIteration as done:
            value: T = done.value
            return value
        except BaseException as err:
            if not isinstance(err, Error):  # the stream may hold unread replies
                conn.disconnect()  # type: ignore[no-untyped-call]
            if isinstance(err, redis.RedisError | OSError):
                raise classify(err, self.url) from err
            raise
        finally:
            pool.release(conn)

    @contextmanager
    def _reaching(self) -> Iterator[None]:
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
