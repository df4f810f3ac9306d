"""Every verb of the command line, found by walking click's command tree: each one
that reads takes --json, and each one is in the command list of docs/operating.md."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click

from runtime.cli import cli

DOCS = Path(__file__).resolve().parents[2] / "docs"

# Verbs that do not read (they change something, serve, or run until stopped),
# each with why it needs no --json; every other verb must take one.
NOT_READS = {
    "put": "prints the jid it made",
    "cancel": "changes jobs",
    "retry": "changes a job",
    "priority": "changes a job",
    "depends": "changes a job",
    "tag": "changes a job",
    "untag": "changes a job",
    "track": "changes a job",
    "events": "prints one JSON object a line already",
    "logs": "prints a job's output as it printed it",
    "pause": "changes a queue",
    "resume": "changes a queue",
    "queue forget": "changes the list of queues",
    "unfail": "moves jobs",
    "recur add": "adds a recurrence",
    "recur remove": "removes a recurrence",
    "worker": "runs a master",
    "demo": "runs a worker over sample jobs",
    "metrics": "serves Prometheus' text format",
    "dashboard": "serves the web dashboard",
    "embedded stop": "stops a server",
}


def verbs(command: click.Command = cli, path: str = "") -> Iterator[tuple[str, click.Command]]:
    """(path, command) of every leaf command: "status", "recur list" ..."""
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from verbs(sub, f"{path} {name}".strip())
    else:
        yield path, command


def test_the_walk_finds_the_verbs_and_every_exemption_is_a_verb() -> None:
    found = dict(verbs())
    assert {"status", "job", "recur list", "embedded status"} <= set(found)
    assert set(NOT_READS) <= set(found), set(NOT_READS) - set(found)


def test_every_verb_that_reads_takes_json() -> None:
    lacking = [
        path
        for path, command in verbs()
        if path not in NOT_READS
        and not any("--json" in p.opts for p in command.params if isinstance(p, click.Option))
    ]
    assert lacking == []


def _command_list() -> str:
    """The fenced block under "## Command line" in docs/operating.md."""
    text = (DOCS / "operating.md").read_text()
    section = text.split("## Command line", 1)[1]
    found = re.search(r"```\n(.*?)```", section, re.S)
    assert found, "docs/operating.md has no command list under ## Command line"
    return found.group(1)


def test_every_verb_is_in_the_command_list_of_operating() -> None:
    listed = _command_list()
    missing = []
    for path, _ in verbs():
        # "runtime recur add|list|remove", "runtime tag|untag JID TAG..." cover theirs
        head, _, last = path.rpartition(" ")
        prefix = f"runtime {head} " if head else "runtime "
        pattern = re.escape(prefix) + r"(?:[\w-]+\|)*" + re.escape(last) + r"(?:\|[\w-]+)*\b"
        if not re.search(pattern, listed):
            missing.append(path)
    assert missing == []
