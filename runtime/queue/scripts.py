"""Loads the Lua operations and runs them; maps their error codes to exceptions.

Every operation is built from: a generated prelude (the key builders of
`keys.py`, the defaults and limits of `config.py`, the closed list of error codes
of `errors.py`, the job states and failure groups of `vocabulary.py`), the
shared library `lua/lib/*.lua` in dependency order, then the operation
`lua/<op>.lua` wrapped in a runner that turns coded errors into error
replies.

Two ways to run them, the same Lua either way:

* Redis 7 function library (FCALL): all operations registered once, as
  `<op>_<digest>` in the library `runtime_<digest>` (the digest changes with the
  code, so masters of two versions can share a server). The library is defined
  once per server, not once per call: a call skips re-running the ~50 KB
  library, about 25 us of a 45 us pop. State a library keeps for the length of
  one call is tagged with the call it belongs to (`CALL`, counted by every
  call's start: state of another call is stale, and made afresh when first
  used, so a call pays only for the state it uses: a reset hook run at every
  call's start cost each call some 650 instructions, whether it used the state
  or not);
  work that must follow all of a call's writes registers with `at_end` (run
  after an operation succeeded, before its reply goes out).
* EVALSHA of one script per operation: Redis 6.2, and users whose ACL lacks
  FUNCTION. A server that lost its scripts or functions gets them loaded again.

Redis full (maxmemory, noeviction) or a replica: the operations that only read
(READ_ONLY) are registered `no-writes` and called with FCALL_RO, so they run
on replicas and while Redis is full; those that only free memory (FREEING:
cancel, forgetting a queue, retention) are registered `allow-oom`. Every other
function is refused while Redis is full (OOM, before it runs: a put fails with
the typed `oom` condition). Scripts run by EVALSHA carry no flags (a shebang
would not compile on 6.2): Redis refuses their first write that may grow
memory while it is full, so the reads run and a cancel frees what it can.

Which one a client uses is found out on its first call and remembered in its
`Session`. How Calls (runtime.queue.ops) are run, the reloads included, is one
plan (`run`): a generator that yields the round trips to make and receives
their replies. It does no I/O itself, so the synchronous `Client`, the
application's `AsyncClient` (adriver.py) and the master's `MasterClient`
(aio.py) drive the very same code, each with its own sockets (the two asyncio
ones through one loop: aplan.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypeVar

import hiredis
import redis

from runtime import config
from runtime.errors import LUA_ERROR_CODES, Error, RedisCondition, RedisTransient
from runtime.queue import faults
from runtime.queue.faults import redact
from runtime.queue.keys import lua_key_builders
from runtime.queue.ops import Call
from runtime.vocabulary import lua_vocabulary

T = TypeVar("T")

# Library files, in the order they are prepended (each uses only earlier ones).
LIBRARY = (
    "util",
    "config",
    "clock",
    "due",
    "compact",
    "job",
    "attempt",
    "wait",
    "stats",
    "unique",
    "domains",
    "lanes",
    "lease",
    "place",
    "sweep",
    "handoff",
    "deps",
    "create",
    "batch",
    "recur",
    "retention",
    "report",
    "pop",
)

# Operations that never write: `no-writes` functions, called with FCALL_RO.
READ_ONLY = frozenset(
    ("counts", "domains", "failed", "get", "jobs", "message_status", "metrics", "now", "peek",
     "workers", "batch_get")
)  # fmt: skip
# Operations that only free memory: `allow-oom` functions, run while Redis is full.
FREEING = frozenset(("cancel", "queue_forget", "retention"))

_RUNNER = """
local function __operation()
{body}
end
local ok, result = pcall(__operation)
if ok then
  __finish()
  return result
end
if type(result) == 'table' then
  if result.code then
    return redis.error_reply(result.code .. ' ' .. tostring(result.msg))
  end
  if result.err then
    return redis.error_reply(result.err)
  end
end
return redis.error_reply('ERR ' .. tostring(result))
"""


def _lua_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    raise TypeError(f"no Lua literal for {value!r}")


# Lua's globals the code uses, as locals of the chunk that the first call sets
# (`__begin`). A function library's globals table is a guarded one: every
# global read goes through its metatable, and such reads were 2 % of a pop. The
# locals are nil while the library loads: code at its top level must not use them.
_CAPTURED = ("type", "pairs", "ipairs", "tonumber", "tostring", "string", "table", "math",
             "cjson", "pcall", "unpack", "select", "error")  # fmt: skip


def _prelude(library: bool) -> str:
    """Constants, the key builders (bound to the namespace of each call), the
    start every operation makes (`__begin(KEYS[1])`: the namespace bound, the
    call counted) and the `at_end` hooks `__finish` runs after it."""
    captured = ", ".join(_CAPTURED)
    defaults = ", ".join(
        f"[{name!r}] = {_lua_literal(s.default)}" for name, s in config.SHARED.items()
    )
    limits = ", ".join(f"{name} = {_lua_literal(v)}" for name, v in config.LIMITS.items())
    codes = ", ".join(f"{code} = true" for code in LUA_ERROR_CODES)
    builders = lua_key_builders().splitlines()
    bind = "\n".join("  " + line for line in builders if line.startswith("K."))
    return "\n".join(
        (
            "#!lua name=" + library_name() if library else "",
            "-- generated by runtime/queue/scripts.py",
            f"local {captured}",
            "local NS",
            "local K = {}",
            "local __bound",
            "local function __bind(ns)",
            "  if ns == __bound then",
            "    return",
            "  end",
            "  NS = ns",
            bind,
            "  __bound = ns",
            "end",
            "local CALL = 0 -- this call's number: state tagged with another is stale",
            "local function __begin(ns)",
            "  if not type then",
            f"    {captured} = {', '.join('_G.' + name for name in _CAPTURED)}",
            "  end",
            "  __bind(ns)",
            "  CALL = CALL + 1",
            "end",
            "local AT_END = {}",
            "local function at_end(finish)",
            "  AT_END[#AT_END + 1] = finish",
            "end",
            "local function __finish()",
            "  for i = 1, #AT_END do",
            "    AT_END[i]()",
            "  end",
            "end",
            f"local DEFAULTS = {{{defaults}}}",
            f"local LIMITS = {{{limits}}}",
            f"local ERROR_CODES = {{{codes}}}",
            lua_vocabulary(),
        )
    )


def _read(relative: str) -> str:
    return resources.files("runtime.queue").joinpath("lua", relative).read_text("utf-8")


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str


def _script(name: str, source: str) -> Script:
    return Script(name, source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())


def _shared(library: bool) -> list[str]:
    return [_prelude(library), *(_read(f"lib/{lib}.lua") for lib in LIBRARY)]


@cache
def load(name: str) -> Script:
    """The full text of operation `name` as one script (EVALSHA)."""
    body = _RUNNER.format(body=_read(f"{name}.lua"))
    return _script(name, "\n".join([*_shared(False), "__begin(KEYS[1])", body]))


@cache
def _digest() -> str:
    """Names the library after its code: the code of every operation, shared parts included."""
    parts = _shared(False) + [_read(f"{op}.lua") for op in operations()]
    return hashlib.sha1("\n".join(parts).encode(), usedforsecurity=False).hexdigest()[:12]


def library_name() -> str:
    return f"runtime_{_digest()}"


def function_name(name: str) -> str:
    return f"{name}_{_digest()}"


@cache
def library() -> str:
    """Every operation as one Redis function library (FUNCTION LOAD)."""
    parts = _shared(True)
    for op in operations():
        body = _RUNNER.format(body=_read(f"{op}.lua"))
        parts.append(
            f"redis.register_function{{function_name = '{function_name(op)}', "
            f"flags = {{{_flags(op)}}}, callback = function(KEYS, ARGV)\n"
            f"__begin(KEYS[1])\n{body}\nend}}"
        )
    return "\n".join(parts)


def _flags(op: str) -> str:
    """The function flags of an operation, as Lua table items."""
    if op in READ_ONLY:
        return "'no-writes'"
    if op in FREEING:
        return "'allow-oom'"
    return ""


def operations() -> list[str]:
    """Every operation shipped in lua/."""
    folder = resources.files("runtime.queue").joinpath("lua")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".lua"))


# --- running Calls: one plan for the synchronous and the asyncio client ------------------

Command = tuple[Any, ...]
Replies = list[Any]  # one per command: the raw reply, or the ResponseError it was
Plan = Generator[list[Command], Replies, T]  # yields round trips, gets their replies
RELOADS = 3  # a server that lost our code this many times in one call keeps losing it


def pack(request: Sequence[Command]) -> bytes:
    """One round trip's commands in RESP, packed by hiredis (C; redis-py's own packer
    is the largest cost of a master's exchange). Arguments: str, bytes, int, float."""
    return b"".join([hiredis.pack_command(command) for command in request])


@dataclass
class Session:
    """What a client knows of its deployment: the URL (for messages, never shown
    unredacted), the namespace root (every operation's KEYS[1]), and whether
    FCALL works for it (found out on the first call, FCALL until then)."""

    url: str
    root: str
    functions: bool = True


def command(session: Session, call: Call[Any]) -> Command:
    """What to send for a Call: FCALL or EVALSHA of its operation, or its command."""
    if not call.script:
        return (call.name, *call.args)
    if session.functions:
        verb = "FCALL_RO" if call.name in READ_ONLY else "FCALL"
        return (verb, function_name(call.name), 1, session.root, *call.args)
    return ("EVALSHA", load(call.name).sha, 1, session.root, *call.args)


def run(session: Session, calls: Sequence[Call[Any]]) -> Plan[list[Any]]:
    """The round trips that run `calls` (one, unless the server lost our library or
    scripts or has no FCALL for us: then they are loaded and the calls that
    failed sent again). Returns each call's decoded reply, or the Error that
    refused it, in order; raises only when the code cannot be loaded."""
    replies = yield [command(session, call) for call in calls]
    for _ in range(RELOADS):
        redo = [i for i, call in enumerate(calls) if call.script and _lost(session, replies[i])]
        if not redo:
            return [result(session, c, reply) for c, reply in zip(calls, replies, strict=True)]
        yield from prepare(session)
        again = yield [command(session, calls[i]) for i in redo]
        for i, reply in zip(redo, again, strict=True):
            replies[i] = reply
    raise RedisTransient(
        RedisCondition.SCRIPTS, f"Redis at {redact(session.url)} keeps losing runtime's scripts"
    )


def prepare(session: Session) -> Plan[None]:
    """Loads the function library, else (no FCALL for this server or user) every
    script; raises what refused it (RedisTransient SCRIPTS when that passes)."""
    if session.functions:
        [reply] = yield [("FUNCTION", "LOAD", "REPLACE", library())]
        if not isinstance(reply, redis.RedisError):
            return
        if _trouble(reply) != "unsupported":
            raise _unloadable(session, reply)
        session.functions = False
    replies = yield [("SCRIPT", "LOAD", load(name).source) for name in operations()]
    for reply in replies:
        if isinstance(reply, redis.RedisError):
            raise _unloadable(session, reply)


def result(session: Session, call: Call[Any], reply: Any) -> Any:
    """A reply decoded, or the runtime Error for an error reply or one that does not decode."""
    if isinstance(reply, BaseException):
        return faults.classify(reply, session.url, call.name)
    try:
        return call.read(reply)
    except Error as err:
        return err


def _lost(session: Session, reply: Any) -> bool:
    """The reply says our code is missing, or FCALL is not for us (then: EVALSHA)."""
    trouble = _trouble(reply)
    if trouble == "unsupported" and session.functions:
        session.functions = False
        return True
    return trouble == "missing"


def _trouble(reply: Any) -> str | None:
    """Why a call failed: "missing" (no library or script loaded), "unsupported" (no
    FCALL or FUNCTION for this server or user), None (anything else)."""
    if not isinstance(reply, redis.ResponseError):
        return None
    text = str(reply)
    if "Function not found" in text or isinstance(reply, redis.exceptions.NoScriptError):
        return "missing"
    if "unknown command" in text.lower():
        return "unsupported"
    denied = isinstance(reply, redis.exceptions.NoPermissionError)
    if denied and ("'fcall" in text or "'function" in text):
        return "unsupported"
    return None


def _unloadable(session: Session, err: redis.RedisError) -> Error:
    found = faults.classify(err, session.url, "loading runtime's scripts")
    if isinstance(found, RedisTransient):
        why = f"runtime's scripts cannot be loaded now: {found}"
        return RedisTransient(RedisCondition.SCRIPTS, why)
    return found
