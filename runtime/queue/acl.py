"""The Redis ACL a deployment's user needs, written once (docs/redis.md, "ACL"; tested by
tests/integration/test_acl.py, and against the commands lua/ calls).

Keys: `~{ns}*`. Every operation names the bare root `{ns}` as its KEYS[1] (its
hash tag routes the call to the namespace's slot; Redis checks declared keys
against the ACL even when a script never writes them), and every other key is
`{ns}:...`. `{ns}*` covers both and nothing else: the closing brace ends the
namespace, so `{runtime}*` never matches `{runtime2}:...`. `~{ns}:*` alone is
not enough.

Channels: `&{ns}:*` (tracked jobs publish their events on `{ns}:events`).

Commands: those the operations call inside Redis (an ACL applies inside
scripts too), those the clients send themselves, and a way to run the
operations: FCALL with FUNCTION LOAD on Redis 7, or EVALSHA with SCRIPT LOAD
(Redis 6.2, or a user without FUNCTION rights). AUTH and HELLO need no grant.
INFO is optional: without it a master cannot check the eviction policy and
says so, and a cancel cannot tell whether Redis has room below maxmemory for
the tombstones of the jobs it cancels (lib/place.lua): it writes them.
"""

from __future__ import annotations

# what the Lua operations call (tests check this against lua/**/*.lua)
IN_SCRIPTS = (
    "del",
    "exists",
    "expire",
    "get",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hincrbyfloat",
    "hmget",
    "hscan",
    "hset",
    "lindex",
    "linsert",
    "llen",
    "lpop",
    "lpush",
    "lrange",
    "lrem",
    "lset",
    "persist",
    "pexpire",
    "pttl",
    "publish",
    "rpop",
    "rpush",
    "sadd",
    "scard",
    "set",
    "sismember",
    "smembers",
    "srandmember",
    "srem",
    "sscan",
    "time",
    "xadd",
    "zadd",
    "zcard",
    "zcount",
    "zincrby",
    "zpopmin",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
    "zrevrange",
    "zrevrangebyscore",
    "zscore",
)
# what the clients send themselves (a master, the Client, the CLI)
FROM_CLIENTS = (
    "ping",
    "blpop",
    "rpush",
    "ltrim",
    "del",
    "hget",
    "hgetall",
    "hset",
    "hdel",
    "zrange",
    "zrevrange",
    "zcard",
    "subscribe",
    "unsubscribe",
    "persist",
    "xread",
)
FUNCTIONS = ("fcall", "fcall_ro", "function|load")  # Redis 7
SCRIPTS = ("evalsha", "script|load")  # Redis 6.2, or users without FUNCTION
# a master's start-up check of the eviction policy and AOF; cancel.lua's check for room
OPTIONAL = ("info",)


def key_pattern(namespace: str) -> str:
    return "~{" + namespace + "}*"


def channel_pattern(namespace: str) -> str:
    return "&{" + namespace + "}:*"


def commands(functions: bool = True, optional: bool = True) -> list[str]:
    """Every command the user needs, sorted. `functions`: run the operations with
    FCALL (Redis 7), else with EVALSHA (Redis 6.2 knows no FCALL). A user given
    both runs FCALL; one whose FCALL or FUNCTION LOAD is refused, EVALSHA."""
    wanted = {*IN_SCRIPTS, *FROM_CLIENTS, *(FUNCTIONS if functions else SCRIPTS)}
    if optional:
        wanted.update(OPTIONAL)
    return sorted(wanted)


def rules(namespace: str, functions: bool = True, optional: bool = True) -> list[str]:
    """The ACL SETUSER rules (after `on` and the password) for a deployment's user."""
    return [
        "resetkeys",
        key_pattern(namespace),
        "resetchannels",
        channel_pattern(namespace),
        "-@all",
        *(f"+{c}" for c in commands(functions, optional)),
    ]
