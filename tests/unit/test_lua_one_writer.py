"""Only lua/lib/place.lua writes a job's state or a state's index (`Place.to_<state>`).

Greps the Lua sources, comments left out, for the three ways a move can be made
by hand: an assignment to a record's state field (`meta.s = ...`, also as one
of several targets), a record built with a state constant (`{ s = FAILED }`),
and a Redis write (ZADD, SREM, LPUSH, DEL ...) on a key of a state's index
(`K.scheduled`, `K.running`, `K.depends`, the lanes, the ended jobs' indexes,
the failure groups), directly or through a local bound to such a key. The
structures' own helpers (lanes.lua's lanes, stats.lua's ended indexes) may
write their keys but are called for a move only from place.lua: a call of
one of them elsewhere fails too. The few other writes are listed in ALLOWED,
each with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from runtime.vocabulary import JobState

LUA = Path(__file__).resolve().parents[2] / "runtime" / "queue" / "lua"
OWNER = "lib/place.lua"

STATES = "|".join(state.name for state in JobState)
# The key builders (keys.py) of the indexes a state keeps jobs in.
INDEX_KEYS = (
    "lane", "scheduled", "running", "depends", "complete_index", "failed_index",
    "cancelled_index", "completed", "cancelled", "failed", "failed_groups",
)  # fmt: skip
WRITES = frozenset(
    ("ZADD", "ZREM", "ZINCRBY", "ZPOPMIN", "ZPOPMAX", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK",
     "ZUNIONSTORE", "SADD", "SREM", "SPOP", "SMOVE", "LPUSH", "RPUSH", "LPOP", "RPOP", "LREM",
     "LSET", "LINSERT", "LTRIM", "RPOPLPUSH", "LMOVE", "DEL", "UNLINK", "RENAME", "EXPIRE",
     "PEXPIRE")
)  # fmt: skip
# The helpers that move a job into or out of a structure: place.lua's alone to call.
MOVERS = ("Lanes.push", "Lanes.remove", "Lanes.insert_by_ticket", "Stats.enter", "Stats.leave")

# (file, what of it, a regex its finding must match, why it may)
ALLOWED = (
    ("lib/lanes.lua", "K.lane", r"", "the lanes are the waiting index's structure"),
    ("lib/lanes.lua", "Lanes.push", r"", "a priority change's new head (insert_by_ticket)"),
    ("lib/stats.lua", "K.complete_index", r"", "Stats.enter / Stats.leave (called by Place)"),
    ("lib/stats.lua", "K.failed_index", r"", "Stats.enter / Stats.leave (called by Place)"),
    ("lib/stats.lua", "K.cancelled_index", r"", "Stats.enter / Stats.leave (called by Place)"),
    ("lib/lease.lua", "K.running", r"'ZADD', K\.running\(meta\.q\), 'XX'", "a renewal"),
    ("queue_forget.lua", "K.", r"^redis\.call\('DEL'", "the keys of an empty queue go"),
    ("lib/compact.lua", "state", r"^local LETTER_STATE = ", "a compact record's letters, read"),
)

FIELD_WRITE = re.compile(r"[\w\]\)]\.s\s*(?:,\s*[\w.\[\]'\"]+\s*)*=(?!=)")
BUILT = re.compile(rf"[{{,]\s*s\s*=\s*(?:{STATES})\b")
CALL = re.compile(r"redis\.p?call\(\s*'(\w+)'")


def code_of(path: Path) -> str:
    """The file without its comments (a `--` inside a string is not met here)."""
    text = re.sub(r"--\[(=*)\[.*?\]\1\]", "", path.read_text(), flags=re.S)
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def call_text(code: str, start: int) -> str:
    """The text of the call opening at `start` (`redis.call(`), to its closing paren."""
    depth, i = 0, code.index("(", start)
    for j in range(i, len(code)):
        depth += {"(": 1, ")": -1}.get(code[j], 0)
        if depth == 0:
            return code[start : j + 1]
    return code[start:]


def bound_to(before: str, name: str) -> str | None:
    """The key builder a local was last bound to before a call (`local key = K.running(q)`)."""
    bindings = re.findall(rf"(?<![\w.]){name}\s*=\s*(K\.\w+)", before)
    return bindings[-1] if bindings else None


def findings(name: str, code: str) -> list[tuple[str, str]]:
    """(what, the line or call) of every write of a state or an index in `code`."""
    found: list[tuple[str, str]] = []
    lines = code.splitlines()
    found += [("state", line.strip()) for line in lines if FIELD_WRITE.search(line)]
    found += [("state", line.strip()) for line in lines if BUILT.search(line)]
    keys = "|".join(INDEX_KEYS)
    for call in CALL.finditer(code):
        if call.group(1).upper() not in WRITES:
            continue
        text = " ".join(call_text(code, call.start()).split())
        for arg in text.split(",")[1:]:
            key = re.match(rf"\s*(K\.(?:{keys}))\b", arg)
            local = re.match(r"\s*(\w+)\s*\)?$", arg)
            written = key.group(1) if key else local and bound_to(code[: call.start()], local[1])
            if written and re.fullmatch(rf"K\.(?:{keys})", written):
                found.append((written, text))
                break
    for mover in MOVERS:
        defined = rf"function {re.escape(mover)}\("
        for line in lines:
            if re.search(rf"(?<![\w.]){re.escape(mover)}\(", line) and not re.search(defined, line):
                found.append((mover, line.strip()))
    return found


def allowed(name: str, what: str, text: str) -> bool:
    return any(
        name == file and (what == kind or (kind == "K." and what.startswith("K.")))
        and re.search(pattern, text)
        for file, kind, pattern, _why in ALLOWED
    )  # fmt: skip


def outside_place(root: Path) -> list[str]:
    """Every write of a state or an index outside place.lua, as `file: what: text`."""
    out = []
    for path in sorted(root.rglob("*.lua")):
        name = path.relative_to(root).as_posix()
        if name == OWNER:
            continue
        for what, text in findings(name, code_of(path)):
            if not allowed(name, what, text):
                out.append(f"{name}: {what}: {text}")
    return out


def test_only_place_lua_writes_a_jobs_state_or_its_indexes() -> None:
    assert outside_place(LUA) == []


def test_place_lua_itself_writes_states_and_indexes() -> None:
    found = findings(OWNER, code_of(LUA / OWNER))
    assert {"state", "K.scheduled", "K.depends", "K.completed", "K.failed"} <= {f[0] for f in found}


def test_the_grep_finds_each_kind_of_write_made_by_hand(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "hand.lua").write_text(
        "-- meta.s = WAITING in a comment is no write\n"
        "meta.s, meta.d = DEPENDS, due\n"
        "local tomb = { k = meta.k, s = CANCELLED }\n"
        "redis.call('SADD', K.depends(meta.q), jid)\n"
        "local key = K.scheduled(queue)\n"
        "redis.call('ZREM', key,\n  member)\n"
        "redis.call('ZSCORE', K.running(meta.q), jid)\n"
        "Stats.leave(jid, meta)\n"
        "if meta.s == RUNNING then end\n"
    )
    assert [line.split(": ")[1] for line in outside_place(tmp_path)] == [
        "state", "state", "K.depends", "K.scheduled", "Stats.leave",
    ]  # fmt: skip
