"""Reporting final job failures to Sentry (only when a DSN is configured).

One event per final failure: a job that raised on its last attempt (sent by the
child, with the exception and its frames) or a child that crashed, was killed
or timed out (sent by the master, with the reason). Events are tagged queue,
klass, jid, attempt and worker, and fingerprinted by the failure group, so one
group is one Sentry issue. Job data and frame locals are scrubbed of anything
that looks like a secret; the job context's repr never shows data.

A child waits for its event to leave before it reports the outcome. The master
never waits inside its event loop: it only hands the event to the SDK's sender
thread (`flush_s=None`) and flushes, bounded, from a thread when it exits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import sentry_sdk
from sentry_sdk.scrubber import DEFAULT_DENYLIST, EventScrubber

log = logging.getLogger(__name__)

DENYLIST = [*DEFAULT_DENYLIST, "dsn", "redis_url", "url", "pass", "pwd", "key", "cert"]
_enabled = False


def init(dsn: str | None, *, server_name: str | None = None) -> bool:
    """Sets up the SDK in this process; False (and nothing done) without a DSN."""
    global _enabled  # noqa: PLW0603 - one SDK setup per process
    if not dsn:
        return False
    sentry_sdk.init(
        dsn=dsn,
        server_name=server_name,
        send_default_pii=False,
        default_integrations=False,
        auto_enabling_integrations=False,
        event_scrubber=EventScrubber(denylist=DENYLIST, recursive=True),
        include_local_variables=True,
        max_breadcrumbs=0,
    )
    _enabled = True
    return True


def enabled() -> bool:
    return _enabled


def report(
    *,
    group: str,
    message: str,
    tags: Mapping[str, Any],
    error: BaseException | None = None,
    flush_s: float | None = 5.0,
) -> None:
    """Sends one event for a final failure and waits up to `flush_s` for it to leave
    (None: does not wait; the SDK's sender thread sends it)."""
    if not _enabled:
        return
    try:
        with sentry_sdk.new_scope() as scope:
            for name, value in tags.items():
                scope.set_tag(name, str(value))
            scope.fingerprint = [group]
            scope.set_extra("failure_group", group)
            if error is not None:
                sentry_sdk.capture_exception(error)
            else:
                scope.set_extra("reason", message[-4000:])
                sentry_sdk.capture_message(
                    f"{group}: {message.splitlines()[0][:200]}", level="error"
                )
        if flush_s is not None:
            sentry_sdk.flush(timeout=flush_s)
    except Exception:  # reporting must never take a worker down
        log.warning("could not report a failure to Sentry", exc_info=True)


def flush(timeout_s: float) -> None:
    """Waits up to `timeout_s` for events not yet sent (blocking: not in a loop)."""
    if _enabled:
        try:
            sentry_sdk.flush(timeout=timeout_s)
        except Exception:  # reporting must never take a worker down
            log.warning("could not flush Sentry events", exc_info=True)
