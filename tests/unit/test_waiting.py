"""The wait plan both clients drive (runtime.queue.waiting), replayed without
I/O: the round trips it asks for, and how it ends for each answer."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.errors import JobFailed, WaitTimeout
from runtime.queue import waiting
from runtime.queue.keys import Keys
from runtime.queue.ops import Ending
from runtime.vocabulary import JobState

KEYS = Keys("ns")


def names(calls: list[Any]) -> list[tuple[str, Any]]:
    return [(call.name, call.args) for call in calls]


def test_a_job_that_ended_answers_in_one_round_trip() -> None:
    plan = waiting.wait(KEYS, "j1", 30)
    assert names(next(plan)) == [("wait", ("j1", 5000))]
    with pytest.raises(StopIteration) as done:
        plan.send([Ending(JobState.COMPLETE, result={"ok": 1})])
    assert done.value.value == {"ok": 1}


def test_a_running_job_blocks_on_its_list_and_reads_it_in_the_same_round_trip() -> None:
    plan = waiting.wait(KEYS, "j1", None)
    next(plan)
    second = plan.send([Ending(JobState.RUNNING)])
    assert names(second) == [("BLPOP", (KEYS.waited("j1"), 5.0)), ("wait", ("j1", 5000))]
    assert second[0].blocks_s == 5.0 and waiting.blocks_s(second) == 5.0
    third = plan.send([None, Ending(JobState.RUNNING)])  # a slice passed: again
    assert names(third) == names(second)
    with pytest.raises(JobFailed) as failed:
        plan.send(["failed", Ending(JobState.FAILED, group="app.Boom", message="boom")])
    assert (failed.value.jid, failed.value.group) == ("j1", "app.Boom")


def test_a_folded_jid_waits_on_the_job_it_was_folded_into() -> None:
    plan = waiting.wait(KEYS, "dup", None)
    next(plan)
    second = plan.send([Ending(JobState.WAITING, jid="j1")])
    assert names(second)[0] == ("BLPOP", (KEYS.waited("j1"), 5.0))
    assert names(second)[1] == ("wait", ("j1", 5000))


def test_no_time_left_is_a_wait_timeout_naming_the_limit() -> None:
    plan = waiting.wait(KEYS, "j1", 0)
    assert names(next(plan)) == [("wait", ("j1", 0))]  # 0: only looks
    with pytest.raises(WaitTimeout, match="job j1 did not end within 0 s"):
        plan.send([Ending(JobState.WAITING)])


def test_a_driver_finds_the_blocking_read_of_a_round_trip_and_nothing_else() -> None:
    """blocked_on: what the asyncio driver serves from its shared waiter."""
    plan = waiting.wait(KEYS, "j1", None)
    first = next(plan)
    assert waiting.blocked_on(first) is None  # wait.lua only: sent as it is
    second = plan.send([Ending(JobState.RUNNING)])
    assert waiting.blocked_on(second) == (KEYS.waited("j1"), 5.0)
    assert waiting.blocked_on([]) is None
