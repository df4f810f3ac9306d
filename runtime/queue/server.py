"""What a worker checks about the Redis server itself before it starts: the
eviction policy, whether it keeps an append-only file, its version.

`server_facts` reads them with one `INFO` (allowed on most managed services),
else with `CONFIG GET`. A server that refuses both (an ACL user without those
commands, a service that renamed them) still answers: its facts are None and
`refused` says what it answered. A server that cannot be reached, or refuses
our credentials, raises `RedisUnavailable`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from runtime.queue.connection import Connection
from runtime.queue.faults import classify
from runtime.queue.ops import text

NO_EVICTION = "noeviction"


@dataclass(frozen=True)
class ServerFacts:
    """The server's settings that decide whether jobs are safe in it; None: unknown."""

    maxmemory_policy: str | None
    appendonly: bool | None
    version: str | None
    refused: str | None = None  # why the settings could not be read

    @property
    def evicting(self) -> bool | None:
        """Whether the server may drop keys when it is full (any policy but noeviction)."""
        if self.maxmemory_policy is None:
            return None
        return self.maxmemory_policy != NO_EVICTION


def server_facts(connection: Connection) -> ServerFacts:
    """The facts of the server `connection` talks to (one or two round trips)."""
    url = connection.url
    try:
        connection.redis.ping()
    except (redis.exceptions.RedisError, OSError) as err:
        raise classify(err, url, "PING") from err
    info, info_refused = _ask(lambda: connection.redis.info("default"), url, "INFO")
    if isinstance(info, Mapping):
        return ServerFacts(
            maxmemory_policy=_text_or_none(info.get("maxmemory_policy")),
            appendonly=None if "aof_enabled" not in info else bool(int(info["aof_enabled"])),
            version=_text_or_none(info.get("redis_version")),
        )
    config, config_refused = _ask(
        lambda: connection.redis.config_get("maxmemory-policy"), url, "CONFIG GET"
    )
    if not isinstance(config, Mapping):
        return ServerFacts(None, None, None, refused=f"{info_refused}; {config_refused}")
    aof, _ = _ask(lambda: connection.redis.config_get("appendonly"), url, "CONFIG GET")
    decoded = {text(k): text(v) for k, v in {**config, **(aof or {})}.items()}
    return ServerFacts(
        maxmemory_policy=decoded.get("maxmemory-policy"),
        appendonly=None if "appendonly" not in decoded else decoded["appendonly"] == "yes",
        version=None,
    )


def _ask(call: Callable[[], Any], url: str, name: str) -> tuple[Any, str | None]:
    """(reply, None), or (None, what the server answered) when it refused the
    command itself (no right to it, or no such command); other failures raise."""
    try:
        return call(), None
    except redis.exceptions.NoPermissionError as err:
        return None, f"{name} refused: {err}"
    except redis.exceptions.ResponseError as err:
        if "unknown command" in str(err).lower():
            return None, f"{name} refused: {err}"
        raise classify(err, url, name) from err
    except (redis.exceptions.RedisError, OSError) as err:
        raise classify(err, url, name) from err


def _text_or_none(value: object) -> str | None:
    return None if value is None else text(value)
