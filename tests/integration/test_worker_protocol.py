"""A child that breaks the framing on its socket: the master names it a protocol
error within seconds, kills the child, and the job's next attempt runs."""

from __future__ import annotations

import time

from runtime import Client
from tests.integration.conftest import StartMaster
from tests.support.waiting import wait_for

J = "tests.integration.jobs"


def test_a_frame_whose_bytes_never_all_arrive_is_a_protocol_error_within_seconds(
    start_master: StartMaster, plain_client: Client
) -> None:
    master = start_master("q", "-c", "1")
    put_at = time.monotonic()
    jid = plain_client.queue("q").put(f"{J}:half_frame", {}, retries=0)

    def failed() -> bool:
        job = plain_client.get_job(jid)
        return job is not None and job.state == "failed"

    wait_for(failed, 15, what="the job to fail")
    job = plain_client.get_job(jid)
    assert job is not None and job.failure is not None
    assert job.failure.group == "runtime.ProtocolError"
    assert "incomplete frame" in job.failure.message
    assert time.monotonic() - put_at < 15, "not left to the job's timeout (an hour)"
    noop = plain_client.queue("q").put(f"{J}:noop", {})
    wait_for(lambda: (j := plain_client.get_job(noop)) is not None and j.state == "complete", 10)
    assert master.proc is not None and master.proc.poll() is None
