"""Size warnings: at most one per queue per interval, only above the setting."""

from __future__ import annotations

import logging

import pytest

from runtime.master.sizes import SizeWatch


def counts(size_warning: float, waiting: int) -> dict[str, dict[str, float]]:
    zero = dict.fromkeys(("throttled", "scheduled", "depends", "running"), 0)
    return {"q": {**zero, "waiting": waiting, "size_warning": size_warning}}


def test_a_queue_over_its_size_warning_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = SizeWatch(None, ["q"], "host-1")  # type: ignore[arg-type]  # check() needs no Redis
    caplog.set_level(logging.WARNING, "runtime.master.sizes")
    for now in (100.0, 100.5, 101.0, 101.5, 102.0):
        watch.check(counts(10, 11), 1.0, now)
    assert [r.getMessage() for r in caplog.records] == [
        "queue is over its size warning: 11 jobs > 10 queue=q worker=host-1"
    ] * 3


@pytest.mark.parametrize(("size_warning", "waiting"), [(0, 1000), (10, 10)])
def test_no_warning_without_a_size_warning_or_at_it(
    caplog: pytest.LogCaptureFixture, size_warning: float, waiting: int
) -> None:
    watch = SizeWatch(None, ["q"], "host-1")  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, "runtime.master.sizes")
    watch.check(counts(size_warning, waiting), 1.0, 0.0)
    assert caplog.records == []
