"""A queue's jobs by state, page by page (lua/jobs.lua): every state, both orders,
pages across lanes of several domains and priorities, and what is left out."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client
from runtime.queue.job import Job
from tests.support.clock import FrozenClock


def jids(page: tuple[int, list[Job]]) -> list[str]:
    return [j.jid for j in page[1]]


def test_waiting_jobs_page_in_pop_order_oldest_first_and_reverse_newest_first(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i in range(7):
        q.put("a.b:c", {}, jid=f"j{i}")
        clock.advance(0.001)
    assert client.admin.jobs("q", "waiting", 0, 3, oldest_first=True) == (7, q.peek(3))
    assert jids(client.admin.jobs("q", "waiting", 3, 3, oldest_first=True)) == ["j3", "j4", "j5"]
    assert jids(client.admin.jobs("q", "waiting", 6, 3, oldest_first=True)) == ["j6"]
    assert jids(client.admin.jobs("q", "waiting", 0, 3)) == ["j6", "j5", "j4"]
    assert jids(client.admin.jobs("q", "waiting", 5, 3)) == ["j1", "j0"]
    assert client.admin.jobs("q", "waiting", 7, 3) == (7, [])
    assert all(
        j.state == "waiting" and j.queue == "q" for j in client.admin.jobs("q", "waiting")[1]
    )


def test_waiting_jobs_of_several_domains_and_priorities_merge_in_pop_order(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i in range(12):
        q.put("a.b:c", {}, jid=f"j{i:02}", domain=f"d{i % 3}", priority=1 if i % 4 == 0 else 0)
    popped_order = [j.jid for j in q.peek(12)]
    listed = [
        jid
        for start in range(0, 12, 5)
        for jid in jids(client.admin.jobs("q", "waiting", start, 5, oldest_first=True))
    ]
    assert listed == popped_order
    assert jids(client.admin.jobs("q", "waiting", 0, 12)) == popped_order[::-1]
    assert jids(client.admin.jobs("q", "waiting", 2, 4)) == popped_order[::-1][2:6]


def test_throttled_jobs_are_listed_lane_by_lane(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("slow.com", rate=1, period=3600)
    q = client.queue("q")
    for i in range(4):
        q.put("a.b:c", {}, jid=f"s{i}", domain="slow.com")
    q.put("a.b:c", {}, jid="free")
    q.pop(1, worker="w")  # s0 spends slow.com's budget: its lane is throttled
    total, found = client.admin.jobs("q", "throttled", oldest_first=True)
    assert total == 3 and [j.jid for j in found] == ["s1", "s2", "s3"]
    assert {j.state for j in found} == {"throttled"}
    assert jids(client.admin.jobs("q", "throttled", 1, 5)) == ["s2", "s1"]
    assert jids(client.admin.jobs("q", "waiting")) == ["free"]


def test_scheduled_running_and_depends_jobs_are_listed(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="later", delay=60)
    q.put("a.b:c", {}, jid="sooner", delay=30)
    q.put("a.b:c", {}, jid="first")
    q.put("a.b:c", {}, jid="second")
    q.put("a.b:c", {}, jid="waits", depends=["first"])
    assert jids(client.admin.jobs("q", "scheduled", oldest_first=True)) == ["sooner", "later"]
    assert jids(client.admin.jobs("q", "scheduled")) == ["later", "sooner"]
    q.pop(1, worker="w")
    clock.advance(1)
    q.pop(1, worker="w")
    assert jids(client.admin.jobs("q", "running", oldest_first=True)) == ["first", "second"]
    assert client.admin.jobs("q", "running")[0] == 2
    assert (client.admin.jobs("q", "depends")[0], jids(client.admin.jobs("q", "depends"))) == (
        1,
        ["waits"],
    )


def test_complete_and_failed_jobs_are_listed_newest_first(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"c{i}")
        q.pop(1, worker="w")[0].complete()
        clock.advance(1)
    q.put("a.b:c", {}, jid="f0")
    q.pop(1, worker="w")[0].fail("boom.Error", "it broke")
    assert jids(client.admin.jobs("q", "complete")) == ["c2", "c1", "c0"]
    assert jids(client.admin.jobs("q", "complete", 1, 5, oldest_first=True)) == ["c1", "c2"]
    total, [failed] = client.admin.jobs("q", "failed")
    assert total == 1 and failed.jid == "f0" and failed.failure is not None
    assert failed.failure.group == "boom.Error"
    client.scheduling.requeue("f0")
    assert client.admin.jobs("q", "failed") == (0, [])
    assert jids(client.admin.jobs("q", "waiting")) == ["f0"]


def test_a_job_that_left_its_state_is_left_out_of_the_page(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("a.b:c", {}, jid="gone")
    q.put("a.b:c", {}, jid="kept")
    client.redis.hdel(client.keys.key("jobs"), "gone")  # its lane entry stays behind
    assert client.admin.jobs("q", "waiting", oldest_first=True) == (2, [client.get_job("kept")])


def test_other_queues_jobs_are_never_listed(client: Client, clock: FrozenClock) -> None:
    client.queue("a").put("a.b:c", {}, jid="in-a")
    client.queue("b").put("a.b:c", {}, jid="in-b")
    assert jids(client.admin.jobs("a", "waiting")) == ["in-a"]
    assert client.admin.jobs("never", "waiting") == (0, [])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("q", "stalled"), "state must be one of"),
        (("q", "waiting", -1, 5), "start"),
        (("q", "waiting", 0, 1001), "count"),
        (("q x", "waiting"), "queue"),
    ],
)
def test_bad_listing_arguments_are_refused_by_the_client(
    client: Client, args: tuple[object, ...], fragment: str
) -> None:
    with pytest.raises(BadArgument, match=fragment):
        client.admin.jobs(*args)  # type: ignore[arg-type]


def test_a_merged_page_deeper_than_its_limit_is_refused(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    client.put_many(q.spec("a.b:c", {}, jid=f"j{i}", domain=f"d{i % 2}") for i in range(10_010))
    with pytest.raises(BadArgument, match="deep"):
        client.admin.jobs("q", "waiting", 10_000, 5)
    assert len(client.admin.jobs("q", "waiting", 9_990, 10)[1]) == 10
