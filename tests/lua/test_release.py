"""Giving a leased job back unfinished: a job that had started keeps its attempt
counted (every run has its own attempt number); one that never started does not."""

from __future__ import annotations

from runtime.queue import ops
from runtime.queue.api.client import Client


def test_a_started_job_given_back_keeps_its_attempt_and_an_unstarted_one_does_not(
    client: Client,
) -> None:
    q = client.queue("q")
    jid = q.put("m:f", {})
    [first] = q.pop(1, worker="w")
    assert first.job.attempt == 1 and first.token is not None
    assert client.conn.call(ops.release("w", {jid: first.token}, {jid})) == {jid: "waiting"}
    [second] = q.pop(1, worker="w")
    assert second.job.attempt == 2, "the stopped run counted"
    assert second.token is not None
    client.conn.call(ops.release("w", {jid: second.token}))
    [third] = q.pop(1, worker="w")
    assert third.job.attempt == 2, "a job that never started is not an attempt"
    assert third.job.remaining == first.job.remaining, "neither spent a retry"
