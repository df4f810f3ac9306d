"""How many jobs may wait on one job: the completion that releases them runs in
one script call, so a job takes at most graph_max dependents (put, depends on,
complete with depends), and all of them move on when it completes."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client
from runtime.config import LIMITS
from tests.support.clock import FrozenClock

MAX = LIMITS["graph_max"]


def test_a_job_takes_at_most_graph_max_dependents_and_releases_them_all(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="root")
    client.put_many(q.spec("a.b:c", {}, jid=f"d{i}", depends=["root"]) for i in range(MAX - 1))
    with pytest.raises(BadArgument, match="root would have more than"):
        client.put_many(q.spec("a.b:c", {}, jid=f"x{i}", depends=["root"]) for i in range(2))
    assert client.get_jobs(["x0", "x1"]) == [None, None]
    q.put("a.b:c", {}, jid="last", depends=["root"])  # the graph_max-th
    q.put("a.b:c", {}, jid="free")
    with pytest.raises(BadArgument, match="root would have more than"):
        client.scheduling.depend("free", "root")
    assert client.get_job("free").state == "waiting"  # type: ignore[union-attr]
    client.queue("r").put("a.b:c", {}, jid="moving")
    [moving] = client.queue("r").pop(1, worker="w")
    with pytest.raises(BadArgument, match="root would have more than"):
        moving.complete(next="q", depends=["root"])
    assert client.get_job("moving").state == "running"  # type: ignore[union-attr]
    assert client.redis.scard(client.keys.key("dependents", jid="root")) == MAX
    assert client.scheduling.depend("last", "root") == "depends", (
        "an edge that exists is no new one"
    )
    [job] = q.pop(1, worker="w")
    assert job.jid == "root"
    job.complete()
    counts = q.counts()
    assert counts["depends"] == 0 and counts["waiting"] == MAX + 1  # and "free"
    assert client.redis.exists(client.keys.key("dependents", jid="root")) == 0
