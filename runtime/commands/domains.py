"""Verbs about domains: limit (rates and concurrency caps; pausing a domain is
`runtime pause --domain`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from runtime.commands.common import client_of, emit
from runtime.errors import BadArgument


def limit_text(lim: Mapping[str, Any]) -> str:
    """One domain's own limits as `runtime limit` lists them."""
    parts = []
    if "rate" in lim:
        parts.append(f"{lim['rate']:g}/{lim['period']:g}s burst {lim.get('burst', 0)}")
    if "concurrency" in lim:
        parts.append(f"concurrency {lim['concurrency']}")
    if lim.get("paused"):
        parts.append("paused")
    return "  ".join(parts)


def _rate(rate: str) -> tuple[float, float]:
    count, _, period = rate.partition("/")
    try:
        return float(count), float(period or 1)
    except ValueError:
        raise BadArgument(f"RATE must look like N/SECONDS, got {rate!r}") from None


@click.command()
@click.argument("domain", required=False)
@click.argument("rate", required=False)
@click.option("--burst", type=click.IntRange(0), help="Extra starts allowed at once.")
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    help="Most jobs of DOMAIN holding a lease at once, every queue and master together.",
)
@click.option("--clear", is_flag=True, help="Remove DOMAIN's own limits.")
@click.option("--json", "as_json", is_flag=True, help="List the limits as JSON (no DOMAIN).")
@click.pass_context
def limit(
    ctx: click.Context,
    domain: str | None,
    rate: str | None,
    burst: int | None,
    concurrency: int | None,
    clear: bool,
    as_json: bool,
) -> None:
    """Limit DOMAIN to RATE job starts, as N/SECONDS (e.g. 10/1, 100/60), and/or
    to --concurrency K jobs running at once; no arguments: list the limits."""
    client = client_of(ctx)
    if as_json and domain is not None:
        raise BadArgument("--json lists the limits: give no DOMAIN")
    if domain is None:
        limits = client.scheduling.domain_limits()
        if as_json:
            emit(limits)
            return
        for name, lim in sorted(limits.items()):
            click.echo(f"{name}  {limit_text(lim)}")
        return
    if clear:
        client.scheduling.clear_domain_limit(domain)
        click.echo(f"cleared {domain}")
        return
    if rate is None and concurrency is None:
        raise BadArgument("give RATE as N/SECONDS, e.g. 10/1, or --concurrency K")
    starts, seconds = _rate(rate) if rate is not None else (None, 1.0)
    client.set_domain_limit(domain, starts, seconds, burst, concurrency)
    said = [f"{rate} (burst {burst or 0})"] if rate is not None else []
    said += [f"concurrency {concurrency}"] if concurrency is not None else []
    click.echo(f"{domain}: {', '.join(said)}")


COMMANDS = [limit]
