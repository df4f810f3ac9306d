"""One connection to a deployment: the URL (or the embedded server), the
namespace's keys, and running the Lua operations with their errors mapped.

Connection and credential failures become `RedisUnavailable` with the URL's
password hidden. `Client` builds its operations on `Connection`.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import redis

from runtime import config
from runtime.errors import ConfigError, RedisUnavailable
from runtime.queue import embedded, scripts
from runtime.queue.keys import Keys


def text(value: object) -> str:
    """A reply value as text (replies are bytes: the connection does not decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def default_worker_id() -> str:
    """`hostname-pid`: unique per running process."""
    return f"{socket.gethostname()}-{os.getpid()}"


def redact(url: str) -> str:
    """The URL with its password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def unavailable(url: str, err: Exception) -> RedisUnavailable:
    if isinstance(err, redis.exceptions.AuthenticationError | redis.exceptions.NoPermissionError):
        if urlsplit(url).password is None and "password=" not in url:
            return RedisUnavailable(
                f"Redis at {redact(url)} requires a password (or ACL user) in the URL"
            )
        return RedisUnavailable(f"Redis at {redact(url)} refused the credentials: {err}")
    if isinstance(err, redis.exceptions.InvalidResponse):  # something answered, not Redis
        return RedisUnavailable(f"the server at {redact(url)} does not speak Redis: {err}")
    return RedisUnavailable(f"cannot reach Redis at {redact(url)}: {err}")


CONNECTION_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.NoPermissionError,
    redis.exceptions.InvalidResponse,
)


def resolve_url(settings: config.Settings) -> str:
    """The configured URL, else the embedded server's (started if needed)."""
    return settings.url or embedded.ensure(settings.state_dir)


def connect(url: str, **kwargs: Any) -> redis.Redis:
    try:
        return redis.Redis.from_url(url, **kwargs)
    except ValueError as err:
        raise ConfigError(f"bad Redis URL {redact(url)}: {err}") from err


class Connection:
    """A connection to one deployment (a namespace in one Redis)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        settings: config.Settings | None = None,
        **redis_kwargs: Any,
    ) -> None:
        if settings is None:
            settings = config.load_settings({"url": url, "namespace": namespace})
        self.settings = settings
        self.url = resolve_url(settings)
        self.keys = Keys(settings.namespace)
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

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        try:
            yield
        except CONNECTION_ERRORS as err:
            raise unavailable(self.url, err) from err

    def run(self, operation: str, *args: Any) -> Any:
        """Runs a script of lua/ with the namespace root as its key."""
        with self._reaching():
            return scripts.call(self.redis, operation, [self.keys.root], list(args))

    def run_json(self, operation: str, *args: Any) -> Any:
        return json.loads(self.run(operation, *args))

    def now_ms(self) -> int:
        """The deployment's time (Redis TIME), in ms: schedules never use ours."""
        return int(self.run("now"))
