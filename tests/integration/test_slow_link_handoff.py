"""Jobs handed to a master on a slow link (issue 28): the master states its recent
round trip when it registers as waiting, and the job's first lease fits it. With
300 ms added each way on the master's link (or on its replies only), every job
handed to it runs once, in the hand-off's own lease: none re-delivered, none
recorded lease-lost, none given up by the master.

The master reaches its private Redis through tests/support/proxy.py; the test
puts the jobs and reads Redis directly."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from runtime import Client
from runtime.queue.embedded import ServerProcess
from tests.integration.test_worker_basics import wait_state
from tests.support.master import MasterProcess
from tests.support.proxy import Proxy
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
JOBS = 12  # handed one at a time: each waits for the master to wait again


def _idle(client: Client, queue: str = "q") -> int:
    return int(client.redis.zcard(client.keys.key("idle", queue=queue)))


@pytest.mark.parametrize(
    ("up_ms", "down_ms"),
    [  # the each-way case takes 35 s: ./dev slow runs it (the replies-only case, 18 s, always)
        pytest.param(300, 300, id="each-way", marks=pytest.mark.slow),
        pytest.param(0, 300, id="replies-only"),
    ],
)
def test_jobs_handed_over_a_slow_link_run_once_in_their_first_lease(
    own: ServerProcess, own_proxy: Proxy, workdir: Path, up_ms: int, down_ms: int
) -> None:
    client = Client.from_url(own.url, namespace="slow")
    own_proxy.delay(up_ms=up_ms, down_ms=down_ms)  # from the start: its round trips are slow
    master = MasterProcess(own, "slow", workdir, "q", "-c", "1", url=own_proxy.url)
    path = workdir / "runs"
    jids = []
    try:
        master.start()
        for _ in range(JOBS):
            wait_for(lambda: _idle(client) == 1, 30, what="the master to wait on q")
            jid = client.queue("q").put(f"{J}:record", {"path": str(path)})
            jids.append(jid)
            wait_state(client, jid, "complete", 30)
    finally:
        master.close()
    for jid in jids:
        job = client.get_job(jid)
        assert job is not None
        events = [(e.event, e.handed) for e in job.history]
        assert events == [("put", False), ("popped", True), ("completed", False)], (
            f"{jid} was not run in its hand-off's lease: {events}"
        )
    runs = Counter(line.split()[0] for line in path.read_text().splitlines())
    assert runs == dict.fromkeys(jids, 1), "each job ran once"
    assert "its lease ran out" not in master.log()
