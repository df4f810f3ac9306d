"""The `batch` verb: a batch's counts, callbacks and failed jobs; retrying them."""

from __future__ import annotations

import click

from runtime.commands.common import check_jid, client_of, emit, fail, when
from runtime.queue.api.batches import BatchStatus


def describe(status: BatchStatus) -> list[str]:
    """A batch for people, one fact a line."""
    state = "open" if status.open else "settled"
    sealed = f"sealed {when(status.sealed_ms)}" if status.sealed else "not sealed (no close yet)"
    lines = [
        f"batch {status.bid}: {state}, {sealed}",
        f"  total {status.total}  pending {status.pending}  completed {status.completed}  "
        f"failed {status.failed} (cancelled {status.cancelled})",
        f"  created {when(status.created_ms)}",
    ]
    if status.description:
        lines.append(f"  description: {status.description}")
    for kind, given, jid, error in (
        ("on_success", status.has_on_success, status.success_jid, status.success_error),
        ("on_complete", status.has_on_complete, status.complete_jid, status.complete_error),
    ):
        if given:
            told = f"put as {jid}" if jid else (f"not put: {error}" if error else "not yet")
            lines.append(f"  {kind}: {told}")
    if status.failed_jids:
        lines.append("  failed jobs: " + " ".join(status.failed_jids))
    if status.ttl_ms >= 0:
        lines.append(f"  expires in {status.ttl_ms / 1000:.0f} s")
    return lines


@click.command("batch")
@click.argument("bid", callback=check_jid)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--retry-failed", is_flag=True, help="Run its failed jobs again first.")
@click.pass_context
def batch(ctx: click.Context, bid: str, as_json: bool, retry_failed: bool) -> None:
    """One batch: its counts, its callbacks and its failed jobs."""
    client = client_of(ctx)
    if client.get_batch(bid) is None:
        raise click.exceptions.Exit(fail(f"no batch {bid}"))
    if retry_failed:
        moved = client.retry_batch(bid)
        if not as_json:
            click.echo(f"{moved} failed jobs run again")
    status = client.get_batch(bid)
    if status is None:  # expired meanwhile
        raise click.exceptions.Exit(fail(f"no batch {bid}"))
    if as_json:
        emit(status.as_dict())
    else:
        click.echo("\n".join(describe(status)))


COMMANDS = [batch]
