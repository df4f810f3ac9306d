"""Every failure of a Redis call, classified once, and URLs without their passwords.

`classify` turns what redis-py raises (or a pipeline returns) into one class of
runtime.errors, so nothing outside runtime/queue/ sees a redis-py exception:

* `RedisTransient` (a `RedisUnavailable`) with its `condition`: the connection
  was refused, reset, closed or timed out (however the event loop says it:
  uvloop refuses a write on a connection the peer closed with a RuntimeError,
  see `closed_transport`), or the server says BUSY, LOADING, READONLY,
  MASTERDOWN, TRYAGAIN, ASK, MOVED, CLUSTERDOWN, NOREPLICAS or OOM. It passes:
  back off and resume.
* `RedisUnavailable`: credentials refused, a right missing (ACL), a server that
  does not speak Redis. It does not pass by waiting.
* the class of a script's error code (`LUA_ERROR_CODES`): the operation refused.
* `ConfigError`: the URL names what is not there: a db the server does not
  have ("DB index is out of range"), or sentinels at a server that is not one
  (it answers "unknown command 'SENTINEL'"). Exit 2, as any configuration error.
* `RedisCommandError`: anything else the server refused.

`redact` hides every form of password a Redis URL can carry; every message
built here names the URL through it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis
import redis.sentinel

from runtime.errors import (
    LUA_ERROR_CODES,
    ConfigError,
    Error,
    RedisCommandError,
    RedisCondition,
    RedisTransient,
    RedisUnavailable,
)

HIDDEN = "***"
MIN_SCRUBBED = 4  # shorter passwords are not hunted for in free text (they would mangle it)
# scheme://, then the whole token up to whitespace or a quote (a URL inside a message)
_URL = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>]*)")
_QUERY_PASSWORD = re.compile(r"(?P<name>(?:^|[?&;])[^=&;#]*pass[^=&;#]*=)(?P<value>[^&;#]*)", re.I)

# Error replies by their first word, for those redis-py does not give a class
_TRANSIENT_CODES = {
    "BUSY": RedisCondition.BUSY,
    "LOADING": RedisCondition.LOADING,
    "READONLY": RedisCondition.READONLY,
    "MASTERDOWN": RedisCondition.MASTERDOWN,
    "TRYAGAIN": RedisCondition.TRYAGAIN,
    "ASK": RedisCondition.TRYAGAIN,  # the slot is migrating (never followed: routing.py)
    "MOVED": RedisCondition.MOVED,
    "NOREPLICAS": RedisCondition.NOREPLICAS,
    "CLUSTERDOWN": RedisCondition.CLUSTERDOWN,
    "OOM": RedisCondition.OOM,
    "NOSCRIPT": RedisCondition.SCRIPTS,
}
_DENIED_CODES = ("NOPERM", "NOAUTH", "WRONGPASS")
# a command inside a script that the user may not run, as Redis 6.2 and 7 say it
_DENIED_IN_SCRIPTS = ("can't run this command", "no permissions to")
# a script run by EVALSHA (no flags) whose first write Redis refused (full: OOM; a
# replica: READONLY) fails with the command's error inside its own; it wrote
# nothing (Redis lets a script that has written go on): as that reply
_REFUSED_IN_SCRIPTS = re.compile(r"@user_script: ?\d+: -(OOM|READONLY)\b")
# what a server says when the URL names what it does not have (see `misconfigured`)
_NO_SUCH_DB = "DB index is out of range"
_NOT_A_SENTINEL = "unknown command 'SENTINEL'"
# uvloop's words for a write on a transport already closed (the peer reset it):
# "unable to perform operation on <TCPTransport closed=True ...>; the handler is closed"
_CLOSED_HANDLER = "the handler is closed"

# --- passwords out of every text ------------------------------------------------------


def redact(text: str) -> str:
    """`text` (a URL, or a message holding URLs) with every password in a URL
    replaced by ***: `user:pass@`, `:pass@`, several hosts each with its own
    (sentinel, cluster), and `password=` (or any `...pass...=`) in the query."""
    return _URL.sub(lambda m: m.group("scheme") + _redact_rest(m.group("rest")), text)


def _redact_rest(rest: str) -> str:
    """After scheme://: the userinfo (up to the last '@' before the query), then
    the query's password parameters."""
    query_at = rest.find("?")
    at = rest.rfind("@", 0, query_at if query_at >= 0 else len(rest))
    head, tail = ("", rest) if at < 0 else (_redact_userinfo(rest[:at]) + "@", rest[at + 1 :])
    path, sep, query = tail.partition("?")
    if sep:
        query = _QUERY_PASSWORD.sub(lambda m: m.group("name") + HIDDEN, "?" + query)[1:]
    return head + path + sep + query


def _redact_userinfo(region: str) -> str:
    """`user:pass` -> `user:***`. Several hosts with credentials of their own
    (`:p1@h1:26379,:p2` before the last host) keep their hosts; anything else
    holding an '@' (a password with '@' in it) is hidden whole."""
    pieces = region.split("@")
    if len(pieces) == 1:
        return _one_userinfo(region)
    hosts_then_info = [piece.rpartition(",") for piece in pieces[1:]]
    if all(comma and ":" in info for _, comma, info in hosts_then_info):
        rendered = [hosts + "," + _one_userinfo(info) for hosts, _, info in hosts_then_info]
        return "@".join([_one_userinfo(pieces[0]), *rendered])
    user, colon, _ = region.partition(":")
    return f"{user}:{HIDDEN}" if colon and "@" not in user else HIDDEN


def _one_userinfo(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{HIDDEN}" if colon else userinfo


def passwords(url: str) -> list[str]:
    """The passwords a URL carries (userinfo and query), as written and decoded."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
        userinfo, at, _ = parts.netloc.rpartition("@")
        pieces = userinfo.split("@") if at else []  # several hosts, each its credentials
        infos = pieces[:1] + [piece.rpartition(",")[2] for piece in pieces[1:]]
        found += [info.partition(":")[2] for info in infos if ":" in info]
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            if "pass" in name.lower() and value:
                found += [value, quote(value, safe="")]
    except ValueError:  # a URL urlsplit cannot read: the structural redaction still applies
        pass
    return [p for p in dict.fromkeys(found) if len(p) >= MIN_SCRUBBED]


def scrub(text: str, url: str) -> str:
    """`text` redacted, and any password of `url` hidden wherever it appears."""
    text = redact(text)
    for secret in passwords(url):
        text = text.replace(secret, HIDDEN)
    return text


# --- classification --------------------------------------------------------------------


def closed_transport(err: BaseException) -> bool:
    """A write refused because the connection is already gone: uvloop raises
    RuntimeError where asyncio's own loop raises OSError (redis-py turns only the
    latter into its ConnectionError)."""
    return isinstance(err, RuntimeError) and _CLOSED_HANDLER in str(err)


def from_redis(err: BaseException) -> bool:
    """Whether `err` came from talking to Redis (`classify` it), not from a bug."""
    return isinstance(err, redis.RedisError | OSError) or closed_transport(err)


def classify(err: BaseException, url: str, operation: str | None = None) -> Error:
    """The runtime error for what a call to Redis at `url` raised or returned."""
    if isinstance(err, Error):
        return err
    where = redact(url)
    detail = scrub(str(err) or type(err).__name__, url)
    if isinstance(err, redis.exceptions.ResponseError | redis.exceptions.ConnectionError):
        code = _code(err)
        found = _by_code(code, detail, where, url, operation)
        if found is not None:
            return found
    link = _link(err, where, detail)
    if link is not None:
        return link
    if isinstance(err, redis.exceptions.InvalidResponse):  # something answered, not Redis
        return RedisUnavailable(f"the server at {where} does not speak Redis: {detail}")
    what = f"Redis refused {operation}" if operation else "Redis refused a command"
    return RedisCommandError(f"{what}: {detail}")


def _link(err: BaseException, where: str, detail: str) -> RedisTransient | None:
    """A connection refused, reset, closed or silent: transient."""
    if isinstance(err, redis.sentinel.MasterNotFoundError):  # its text holds a whole repr
        service = detail.split(" : ", 1)[0].removeprefix("No master found for ")
        return RedisTransient(
            RedisCondition.CONNECTION,
            f"cannot reach Redis at {where}: no sentinel there named a primary for "
            f"service {service} (sentinels down or unreachable, or the service misnamed)",
        )
    if isinstance(err, redis.exceptions.ConnectionError | ConnectionError):
        condition = RedisCondition.CONNECTION
    elif isinstance(err, redis.exceptions.TimeoutError | TimeoutError):
        return RedisTransient(
            RedisCondition.TIMEOUT, f"Redis at {where} did not answer in time: {detail}"
        )
    elif isinstance(err, OSError) or closed_transport(err):
        condition = RedisCondition.CONNECTION
    else:
        return None
    return RedisTransient(condition, f"cannot reach Redis at {where}: {detail}")


def _code(err: redis.exceptions.RedisError) -> str:
    """The error reply's first word: redis-py strips it for the codes it knows
    (keeping it as status_code) and leaves it in the text for the others."""
    code = getattr(err, "status_code", None)
    auth = redis.exceptions.AuthenticationError | redis.exceptions.AuthorizationError
    if isinstance(err, auth):  # WRONGPASS, NOAUTH, or an "ERR" redis-py recognized
        return code if code in _DENIED_CODES else "WRONGPASS"
    if isinstance(code, str) and code:
        return code
    if isinstance(err, redis.exceptions.BusyLoadingError):
        return "LOADING"
    return (str(err).split(" ", 1)[0] if str(err) else "").upper()


def _by_code(code: str, detail: str, where: str, url: str, operation: str | None) -> Error | None:
    condition = _TRANSIENT_CODES.get(code)
    if condition is not None:
        return RedisTransient(condition, f"Redis at {where} is unavailable ({condition}): {detail}")
    if code in _DENIED_CODES:
        return denied(code, detail, where, url)
    cls = LUA_ERROR_CODES.get(code)
    if cls is not None:
        return cls(detail.split(" ", 1)[1] if detail.startswith(code + " ") else detail)
    refused = _REFUSED_IN_SCRIPTS.search(detail)
    if refused:
        condition = _TRANSIENT_CODES[refused.group(1)]
        return RedisTransient(condition, f"Redis at {where} is unavailable ({condition}): {detail}")
    if any(sign in detail for sign in _DENIED_IN_SCRIPTS):
        return denied("NOPERM", detail, where, url)
    return misconfigured(detail, where, url)


def misconfigured(detail: str, where: str, url: str) -> ConfigError | None:
    """A URL naming what the server does not have: a configuration error (exit 2)
    with a line saying what to change, not a refused command."""
    if _NO_SUCH_DB in detail:
        return ConfigError(
            f"Redis at {where} has no such db ({detail}): use a db below its "
            "`databases` setting (16 unless changed), e.g. /0"
        )
    if _NOT_A_SENTINEL in detail and url.lower().startswith("redis+sentinel://"):
        return ConfigError(
            f"{where} is not a Sentinel: the server there answers as a plain Redis "
            f"({detail.strip()}); name the sentinels' host:port (26379 by default), "
            "or use redis://host:port for one server"
        )
    return None


def denied(code: str, detail: str, where: str, url: str) -> RedisUnavailable:
    """Credentials refused, or a right missing: one line naming what to fix."""
    if code == "NOPERM":
        user = _user(url) or "default"
        return RedisUnavailable(
            f"Redis at {where} denies user {user!r} a right runtime needs (ACL): {detail} "
            '(the rules it needs: docs/redis.md, "ACL")'
        )
    if not _has_password(url) and _user(url) is None:
        return RedisUnavailable(f"Redis at {where} requires a password (or ACL user) in the URL")
    return RedisUnavailable(f"Redis at {where} refused the credentials: {detail}")


def _has_password(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.password) or any(
        "pass" in name.lower() and value for name, value in parse_qsl(parts.query)
    )


def _user(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    user = unquote(parts.username) if parts.username else None
    if user is None:
        user = next((v for k, v in parse_qsl(parts.query) if k.lower() == "username"), None)
    return user or None
