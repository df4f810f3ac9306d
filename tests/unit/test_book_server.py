"""The book when its fork server dies by itself: a new one is asked for while the
master runs, none once it stops; how it ended is logged."""

from __future__ import annotations

import logging
import signal

import pytest

from runtime.master import events
from tests.unit.test_book import Rig


def test_a_dead_fork_server_is_replaced_while_the_master_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(concurrency=2)
    rig.start()
    with caplog.at_level(logging.ERROR):
        rig.apply(events.ServerExited(4242, None, signal.SIGKILL))
    assert [a for a in rig.step() if isinstance(a, events.ReplaceServer)] == [
        events.ReplaceServer()
    ]
    assert "fork server killed by signal 9 (SIGKILL); starting a new one pid=4242" in caplog.text


def test_a_fork_server_that_dies_while_stopping_is_not_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(concurrency=1)
    rig.start()
    rig.apply(events.Signalled(events.Intent.DRAIN))
    rig.step()
    with caplog.at_level(logging.ERROR):
        rig.apply(events.ServerExited(4242, 3, None))
    assert not [a for a in rig.step() if isinstance(a, events.ReplaceServer)]
    assert "fork server exited with code 3 pid=4242" in caplog.text
