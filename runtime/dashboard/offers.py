"""What the dashboard offers for a job by its state, decided here and only here: the
views pass it to the templates, which never compare a state (a test reads them).

A job's page offers the actions of `job_actions`; a list of a queue's jobs in one
state shows what `listing` says. A state runtime/vocabulary.py gains must be
placed in `job_actions` before mypy passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from runtime.vocabulary import ENDED_STATES, Count, JobState


class Act(StrEnum):
    """An action a job's page offers, named as its form posts (actions.py)."""

    RETRY = "retry"  # run it now (again): requeue
    DELETE = "delete"  # a finished job: deleted
    CANCEL = "cancel"  # a job not finished: cancelled, so deleted
    PRIORITY = "priority"  # set its priority


_FINISHED = frozenset((Act.RETRY, Act.DELETE))
_WAITS_FOR_ITS_TIME = frozenset((Act.RETRY, Act.CANCEL, Act.PRIORITY))
_UNFINISHED = frozenset((Act.CANCEL, Act.PRIORITY))


def job_actions(state: JobState) -> frozenset[Act]:
    """The actions a job's page offers for a job in `state`."""
    match state:
        case JobState.COMPLETE | JobState.FAILED:
            return _FINISHED
        case JobState.SCHEDULED:
            return _WAITS_FOR_ITS_TIME
        case JobState.WAITING | JobState.THROTTLED | JobState.RUNNING | JobState.DEPENDS:
            return _UNFINISHED
        case JobState.CANCELLED:  # a tombstone: no job to act on (retention removes it)
            return frozenset()
        case _:
            assert_never(state)


@dataclass(frozen=True)
class Listing:
    """What a list of a queue's jobs in one state shows: the failure columns (when
    and why each failed), a retry button on each row."""

    failures: bool
    retry: bool


def listing(state: JobState) -> Listing:
    return Listing(failures=state == JobState.FAILED, retry=state in _RUN_AGAIN)


_RUN_AGAIN = tuple(s for s in ENDED_STATES if s != JobState.CANCELLED)  # a tombstone is no job


CANCEL_EVENT = JobState.CANCELLED.value  # the history event a cancel leaves, named as the state


def tombstone(state: JobState) -> bool:
    """Whether a job's page shows a tombstone: what is left of a cancelled job."""
    return state == JobState.CANCELLED


def runs(state: JobState) -> bool:
    """Whether a job's page shows how long the job has run (its lease with it)."""
    return state == JobState.RUNNING


# The list a count of a queue links to: its state's, the running for the stalled.
LISTED_AS: dict[Count, JobState] = {
    count: JobState.RUNNING if count == Count.STALLED else JobState(count) for count in Count
}
