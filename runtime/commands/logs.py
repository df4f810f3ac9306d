"""`runtime logs JID [--follow]`: a job's output as it runs (docs/operating.md,
"runtime logs"). A running job's lines come from its live stream (its master
sends them in batches a few times a second: lua/live.lua); a job that ended
shows the output kept with it (its last attempt's tail). Lines a job prints in
its last moments go with its report, not live: a follower prints them from the
kept output when the job ends."""

from __future__ import annotations

import sys
import time

import click

from runtime.commands.common import check_jid, client_of, fail
from runtime.queue.api.client import Client
from runtime.vocabulary import ENDED_STATES

POLL_S = 0.2  # how often a follower reads the live stream
STATE_EVERY_S = 1.0  # how often it looks whether the job ended
SEEN_CHARS = 4096  # the end of what it printed, to find where the kept output goes on
BATCHES = 100  # live batches one read takes


@click.command()
@click.argument("jid", callback=check_jid)
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.pass_context
def logs(ctx: click.Context, jid: str, follow: bool) -> None:
    """A job's output: what it printed so far while it runs, else the output kept
    with it; --follow prints its lines as they come and exits when it ends."""
    client = client_of(ctx)
    job = client.get_job(jid)
    if job is None:
        raise click.exceptions.Exit(fail(f"no job {jid}"))
    if job.state in ENDED_STATES:
        _write(job.output)
        return
    after, seen = _print_live(client, jid, "0-0", "")
    if not follow:
        return
    checked = time.monotonic()
    while True:
        time.sleep(POLL_S)
        after, seen = _print_live(client, jid, after, seen)
        if time.monotonic() - checked < STATE_EVERY_S:
            continue
        checked = time.monotonic()
        job = client.get_job(jid)
        if job is None or job.state in ENDED_STATES:
            after, seen = _print_live(client, jid, after, seen)
            if job is not None:
                _write(_unseen(job.output, seen))
            return


def _print_live(client: Client, jid: str, after: str, seen: str) -> tuple[str, str]:
    """Prints the live batches after `after`: the id to read on from, and the end
    of what was printed (`seen`, its last SEEN_CHARS)."""
    while True:
        after, batches = client.admin.live_output(jid, after, BATCHES)
        for text, dropped in batches:
            _write(text)
            if dropped:
                _write(f"[runtime: {dropped} lines not shown: over the live output budget]\n")
            seen = (seen + text)[-SEEN_CHARS:]
        if len(batches) < BATCHES:
            return after, seen


def _unseen(output: str, seen: str) -> str:
    """What of the output kept with an ended job was not printed live. All of it
    when nothing was seen; nothing when the two do not meet (lines were dropped,
    or the kept tail is older than what was seen)."""
    if not seen:
        return output
    for size in (len(seen), 1024, 128):
        probe = seen[-size:]
        at = output.rfind(probe)
        if at >= 0:
            return output[at + len(probe) :]
    return ""


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


COMMANDS = [logs]
