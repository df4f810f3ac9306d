"""What the synchronous and the asyncio client share, written once: the settings a
client is made with (and each namespace's of a sharded site), the check of a
cancel's `by`, and how a put retried after a lost reply knows its first try
landed. runtime.queue.api.client and runtime.queue.api.aclient use them."""

from __future__ import annotations

import json
from dataclasses import replace

from runtime import config
from runtime.errors import BadArgument
from runtime.queue.job import Job
from runtime.queue.shards import Shards
from runtime.queue.wire import JobSpec
from runtime.vocabulary import CancelledBy


def settings_for(
    url: str | None,
    namespace: str | None,
    settings: config.Settings | None,
    shards: str | None,
) -> config.Settings:
    """The settings a client is made with: `settings`, else those of the
    environment and config file with `url`, `namespace` and `shards` given."""
    if settings is not None:
        return settings
    return config.load_settings({"url": url, "namespace": namespace, "shards": shards})


def member_settings(settings: config.Settings, shards: Shards, namespace: str) -> config.Settings:
    """The settings of one namespace of a site: its own URL when the rule names one."""
    return replace(settings, namespace=namespace, url=shards.url_of(namespace) or settings.url)


def cancelled_by(by: CancelledBy | str) -> CancelledBy:
    """`by` as a CancelledBy; BadArgument (one line) for any other word."""
    try:
        return CancelledBy(by)
    except ValueError:
        known = ", ".join(CancelledBy)
        raise BadArgument(f"by must be one of {known}, got {by!r}") from None


def all_put(specs: list[JobSpec], found: list[Job | None]) -> bool:
    """Whether the jobs `found` by the jids of `specs` are these specs' jobs (a put
    retried after a lost reply: its first try landed)."""
    return all(
        job is not None and job.klass == spec.klass and job.data == json.loads(spec.data_json)
        for job, spec in zip(found, specs, strict=True)
    )
