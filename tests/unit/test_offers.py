"""What the dashboard offers for a job by its state (runtime/dashboard/offers.py):
one place, every state placed."""

from __future__ import annotations

import pytest

from runtime.dashboard import actions, offers, reads
from runtime.dashboard.offers import Act
from runtime.vocabulary import ENDED_STATES, Count, JobState


@pytest.mark.parametrize("state", list(JobState))
def test_every_state_offers_what_its_job_can_take(state: JobState) -> None:
    offered = offers.job_actions(state)
    if state == JobState.CANCELLED:
        assert not offered, "a tombstone is no job: nothing to act on"
        return
    finished = state in ENDED_STATES
    assert (Act.DELETE in offered) is finished, "a finished job is deleted"
    assert (Act.CANCEL in offered) is not finished, "one not finished is cancelled"
    assert (Act.PRIORITY in offered) is not finished, "only a job yet to run is reordered"
    assert (Act.RETRY in offered) is (finished or state == JobState.SCHEDULED)


def test_every_action_offered_is_one_the_dashboard_takes() -> None:
    assert {str(act) for act in Act} <= set(actions.ACTIONS)


def test_a_list_of_jobs_shows_failures_of_the_failed_and_retry_for_the_finished() -> None:
    shown = {state: offers.listing(state) for state in reads.LISTED_STATES}
    assert [s for s, how in shown.items() if how.failures] == [JobState.FAILED]
    assert {s for s, how in shown.items() if how.retry} == set(ENDED_STATES) - {JobState.CANCELLED}


def test_only_a_running_job_shows_how_long_it_has_run() -> None:
    assert [s for s in JobState if offers.runs(s)] == [JobState.RUNNING]


def test_every_count_links_to_a_list_the_stalled_to_the_running() -> None:
    assert set(offers.LISTED_AS) >= set(reads.QUEUE_STATES)
    assert set(offers.LISTED_AS.values()) <= set(reads.LISTED_STATES)
    assert offers.LISTED_AS[Count.STALLED] == JobState.RUNNING
    assert all(offers.LISTED_AS[c] == str(c) for c in Count if c != Count.STALLED)
