"""Client-side encoding and checks (no Redis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from runtime import BadArgument
from runtime.queue import wire
from runtime.queue.faults import redact


def sample_job(job: object) -> None:
    """A module-level function, as jobs are."""


def test_a_function_becomes_its_import_path() -> None:
    assert wire.klass_path(sample_job) == "tests.unit.test_wire:sample_job"
    with pytest.raises(BadArgument):
        wire.klass_path(lambda job: None)


def test_specs_encode_compact_json_and_keep_data_text() -> None:
    spec = wire.JobSpec.build("q", "a.b:c", {"é": 1}, jid="j", priority=-1, delay=1.5)
    encoded, data = spec.to_wire()
    assert data == '{"é":1}'
    # options at put.lua's defaults (retries 5, no tags ...) are left out
    assert json.loads(encoded) == {
        "queue": "q",
        "klass": "a.b:c",
        "jid": "j",
        "priority": -1,
        "delay_ms": 1500,
    }
    full = wire.JobSpec.build(
        "q",
        "a.b:c",
        jid="k",
        retries=0,
        tags=["t"],
        depends=["j"],
        domain="d",
        unique_key="u",
        tracked=True,
    )
    assert json.loads(full.to_wire()[0]) == {
        "queue": "q",
        "klass": "a.b:c",
        "jid": "k",
        "retries": 0,
        "tags": ["t"],
        "depends": ["j"],
        "domain": "d",
        "unique_key": "u",
        "tracked": True,
    }


def test_at_takes_aware_datetimes_or_epoch_seconds() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert wire.JobSpec.build("q", "a.b:c", at=at).options["at_ms"] == 1893456000000
    plus2 = at.astimezone(timezone(timedelta(hours=2)))
    assert wire.JobSpec.build("q", "a.b:c", at=plus2).options["at_ms"] == 1893456000000
    assert wire.JobSpec.build("q", "a.b:c", at=1.5).options["at_ms"] == 1500
    with pytest.raises(BadArgument, match="timezone"):
        wire.JobSpec.build("q", "a.b:c", at=datetime(2030, 1, 1))


def test_message_cap_keeps_the_tail_on_a_character_boundary() -> None:
    message = "ü" * 50_000 + "end"
    capped = wire.cap_message(message)
    assert len(capped.encode()) <= 64 * 1024
    assert capped.endswith("end") and capped.startswith("[... cut ")
    assert wire.cap_message("short") == "short"


def test_urls_in_errors_hide_passwords() -> None:
    assert redact("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact("redis://host:6379/0") == "redis://host:6379/0"


def test_domain_limits_are_checked() -> None:
    assert json.loads(wire.domain_limit("x.com", 10, 1, None)) == {
        "rate": 10.0,
        "period": 1.0,
        "burst": 0,
    }
    for bad in ((" x", 1, 1, None), ("x", 0, 1, None), ("x", 1, -1, None), ("x", 1, 1, -1)):
        with pytest.raises(BadArgument):
            wire.domain_limit(*bad)
