"""Job states and failure groups are spelled once (runtime/vocabulary.py): no
other module of runtime, Python or Lua, spells one as a quoted literal, and no
dashboard template either (without exceptions: what a state offers is decided in
runtime/dashboard/offers.py).

Some words of other vocabularies are spelled like a state: a history event
(`failed`), a lease report's kind (`complete`), an operation (`failed.lua`), a
put option (`depends`), a counter of the queue hash (`throttled`) or a field of
a reply. Those lines are let through by ALLOWED below, each with its reason;
an entry that no longer lets anything through fails the test too, so the list
stays as short as the code needs.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

import runtime
from runtime import vocabulary
from runtime.queue import scripts
from runtime.vocabulary import Count, FailureGroup, JobState

ROOT = Path(runtime.__file__).parent
WORDS = frozenset([*JobState, *Count, *FailureGroup])
HOME = ROOT / "vocabulary.py"
TEMPLATES = ROOT / "dashboard" / "templates"

# (file under runtime/, a pattern its line matches, why that literal is not a state or group)
ALLOWED: list[tuple[str, str, str]] = [
    ("queue/keys.py", r'^    "\w+": "[\w:{}-]+",$', "key templates (indexes named after states)"),
    ("queue/api/admin.py", r'keys\.key\("failed", group=group\)', "the key template `failed`"),
    ("queue/scripts.py", r'^    \("counts", "domains", "failed",', "operation names (lua/*.lua)"),
    ("queue/ops/jobs.py", r'\bop\("(depends|failed)"', "operation names (lua/<op>.lua)"),
    ("queue/ops/leasing.py", r'_batch\("complete"', "operation names (lua/<op>.lua)"),
    ("queue/ops/leasing.py", r'^        "complete": lambda: complete\(', "a lease report's kind"),
    ("queue/ops/leasing.py", r'^EXCHANGED: .*\("complete", "retry", "fail"\)', "its reports"),
    ("queue/ops/__init__.py", r'^    "(complete|depends)",$', "the operations it names"),
    ("queue/leases.py", r'"complete", "retry", "fail", "release"', "a lease report's kinds"),
    ("master/jobs.py", r'"running" if message\.loop_running', "an asyncio loop's, not a job's"),
    ("master/reasons.py", r'FAILED = "failed"  # the attempt failed', "a Fate, the master's"),
    ("master/held.py", r'RUNNING = "running"', "a Where: where the master holds a job"),
    ("children/protocol.py", r'kind: ClassVar\[str\] = "failed"', "a pipe message's kind"),
    ("commands/embedded.py", r'"running"', "the embedded Redis server's, not a job's"),
    ("commands/queues.py", r'\("failed", lambda j: j\.failure', "the CLI's label of a time column"),
    ("metrics.py", r'\("failed", "jobs failed for good"\)', "the queue total total:failed"),
    ("queue/stats.py", r'"failed"', "throughput and stats fields: failures counted"),
    # the put option (and reply field) `depends`: the jids a job waits on
    ("typed.py", r'\("tags", "depends"\)', "the put option depends"),
    ("queue/api/client.py", r'options\.get\("depends"', "the put option depends"),
    ("queue/wire.py", r'"depends"', "the put option depends"),
    ("queue/api/scheduling.py", r'"depends"', "the put option depends"),
    ("queue/job.py", r'reply\.get\("depends"', "the reply field depends (jids)"),
    ("commands/jobs.py", r'_related\("depends"', "the jids a job waits on"),
    ("queue/lua/lib/create.lua", r"Check\.tokens\('depends'", "the put option depends"),
    ("queue/lua/lib/report.lua", r"Check\.tokens\('depends'", "the complete option depends"),
    ("queue/lua/recur.lua", r"k == 'depends'", "the put option depends"),
    ("queue/lua/get.lua", r"\{ 'depends', Json\.array", "the reply field depends (jids)"),
    # the counters `queued` and `throttled` of the queue hash q:<queue> (keys.py)
    ("queue/lua/", r"K\.queue\(queue\), ('queued', )?'throttled'", "a field of q:<queue>"),
    ("queue/lua/domains.lua", r"\{ 'throttled', int\(", "a domain's jobs in throttled lanes"),
    # the history events and the counters of lib/stats.lua
    ("queue/lua/lib/place.lua", r"Job\.(event|append)\(.*'failed'", "the history event failed"),
    ("queue/lua/lib/place.lua", r"Job\.append\(tomb, .*'cancelled'", "the history event cancelled"),
    ("master/reasons.py", r'Ending\(FailureGroup\.CANCELLED, "cancelled"', "an Ending's text"),
    ("queue/lua/lib/place.lua", r"Stats\.count\(meta\.q, 'failed'", "the stats counter failed"),
    (
        "queue/lua/lib/report.lua",
        r"Lease\.check\(.*'complete'|meta\.lr(, meta\.f)? = 'complete'",
        "a lease report's kind (meta.lr)",
    ),
    # the workers reply: the jobs a master runs
    ("queue/lua/workers.lua", r"\{ 'running', '\['", "a worker's running jobs"),
    ("dashboard/reads.py", r'info\.get\("running"', "a worker's running jobs"),
    ("queue/api/siteparts.py", r'into\["running"\] = ', "a worker's running jobs, a site's"),
    ("queue/api/siteparts.py", r'into\["throttled"\] = ', "a domain's throttled jobs, a site's"),
    ("commands/workers.py", r'info\.get\("running"', "a worker's running jobs"),
    ("metrics.py", r'info\["running"\]', "a worker's running jobs"),
    ("dashboard/jobreads.py", r'info\.get\("throttled"\)', "a domain's jobs in throttled lanes"),
    # a batch's counts (completed, failed) and its callbacks' kinds (on_complete)
    ("queue/lua/lib/batch.lua", r"'(failed|complete)'", "a batch's count, a callback's kind"),
    ("queue/api/batches.py", r'"(failed|cancelled)"', "a batch's counts failed and cancelled"),
    ("queue/api/batches.py", r'options\.get\("depends"\)', "the put option depends"),
]


def _python_literals(path: Path) -> Iterator[tuple[int, str]]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text("utf-8")).readline)
    for token in tokens:
        if token.type != tokenize.STRING or token.string.lstrip("rbuRBU")[:1] not in "'\"":
            continue  # f-strings are FSTRING_* tokens from 3.12 on; prefix f: not a word
        value = ast.literal_eval(token.string)
        if isinstance(value, str):
            yield token.start[0], value


_LUA_STRING = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|--")


def _lua_literals(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        for match in _LUA_STRING.finditer(line):
            if match.group(0) == "--":
                break  # a comment to the end of the line
            yield number, match.group(1) if match.group(1) is not None else match.group(2)


def _hits() -> Iterator[tuple[str, int, str, str]]:
    """(file under runtime/, line number, the line, the word) for every quoted word."""
    for path in sorted(ROOT.rglob("*")):
        if path == HOME or path.suffix not in (".py", ".lua"):
            continue
        read = _python_literals if path.suffix == ".py" else _lua_literals
        lines = path.read_text("utf-8").splitlines()
        for number, value in read(path):
            word = value.strip('"')  # a JSON string written out in Lua: '"complete"'
            if word in WORDS:
                yield str(path.relative_to(ROOT)), number, lines[number - 1], word


def _allowed(name: str, line: str) -> int | None:
    for i, (where, pattern, _) in enumerate(ALLOWED):
        if name.startswith(where) and re.search(pattern, line):
            return i
    return None


def test_no_module_but_the_vocabulary_spells_a_state_or_a_group() -> None:
    used: set[int] = set()
    found = []
    for name, number, line, word in _hits():
        entry = _allowed(name, line)
        if entry is None:
            found.append(f"runtime/{name}:{number}: {word!r}: {line.strip()}")
        else:
            used.add(entry)
    assert not found, "use runtime.vocabulary (Lua: the prelude's locals):\n" + "\n".join(found)
    stale = [ALLOWED[i][:2] for i in range(len(ALLOWED)) if i not in used]
    assert not stale, f"allow-list entries that let nothing through: {stale}"


def _template_literals(path: Path) -> Iterator[tuple[int, str]]:
    """The quoted strings of a template's expressions and tags, not its HTML text."""
    jinja2 = pytest.importorskip("jinja2", reason="the dashboard extra is not installed")
    for number, token, value in jinja2.Environment().lex(path.read_text("utf-8")):
        if token == "string":
            yield number, ast.literal_eval(value)


def test_no_template_spells_a_state() -> None:
    """Which actions and columns a state offers the views decide (dashboard/offers.py):
    a template compares no state, and names none."""
    found = [
        f"runtime/{path.relative_to(ROOT)}:{number}: {word!r}"
        for path in sorted(TEMPLATES.glob("*.html"))
        for number, word in _template_literals(path)
        if word in WORDS
    ]
    assert not found, "pass what a state offers from the view (offers.py):\n" + "\n".join(found)


def test_the_template_scanner_sees_literals_in_tags_not_text(tmp_path: Path) -> None:
    page = tmp_path / "x.html"
    page.write_text(
        '<th>failed</th>{% if s in ("failed", \'running\') %}\n{{ "x" if a else "complete" }}',
        "utf-8",
    )
    found = list(_template_literals(page))
    assert found == [(1, "failed"), (1, "running"), (2, "x"), (2, "complete")]


def test_the_scanner_sees_literals_in_both_languages(tmp_path: Path) -> None:
    py = tmp_path / "x.py"
    py.write_text('a = "waiting"  # "failed"\nb = f"{a}running"\n', "utf-8")
    assert list(_python_literals(py)) == [(1, "waiting")]
    lua = tmp_path / "x.lua"
    lua.write_text("if s == 'running' then -- 'failed'\nx = \"a\\\"b\" .. 'c'\n", "utf-8")
    assert list(_lua_literals(lua)) == [(1, "running"), (2, 'a\\"b'), (2, "c")]


def test_states_compare_and_hash_as_the_strings_of_the_spec() -> None:
    state: JobState = JobState.WAITING
    assert state == "waiting"
    assert {"waiting": 1}[JobState.WAITING] == 1
    assert f"{JobState.THROTTLED}" == "throttled"
    assert [str(c) for c in Count] == [
        "waiting",
        "throttled",
        "scheduled",
        "running",
        "stalled",
        "depends",
        "complete",
        "failed",
        "cancelled",
    ]


def test_every_state_and_count_is_a_lua_local_of_its_name() -> None:
    first = vocabulary.lua_vocabulary().splitlines()[0]
    names = {member.name: member.value for member in [*JobState, *Count]}
    assert first == f"local {', '.join(names)} = {', '.join(repr(v) for v in names.values())}"


def test_the_prelude_carries_the_vocabulary() -> None:
    source = scripts.load("get").source
    assert vocabulary.lua_vocabulary() in source
    assert "GROUP = {" in source and "CORRUPT_JOB = 'runtime.CorruptJob'" in source
