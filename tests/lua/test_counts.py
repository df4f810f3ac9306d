"""Counts of a queue (lua/counts.lua with lib/stats.lua): complete and failed per
queue, totals that retention never resets, the oldest waiting job's age; forgetting
an empty queue; what masters tell of themselves (workers.lua, worker_info.lua)."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client, WrongState
from tests.conftest import snapshot
from tests.support.clock import FrozenClock

# a pop on 7 (a function) remembers what one on 6.2 (a script)
# does not: both in the default run
pytestmark = pytest.mark.every_version


def run_one(client: Client, queue: str, jid: str, outcome: str) -> None:
    q = client.queue(queue)
    q.put("a.b:c", {}, jid=jid, retries=1)
    [job] = q.pop(1, worker="w")
    if outcome == "complete":
        job.complete()
    elif outcome == "fail":
        job.fail("boom.Error", "it broke")
    else:
        job.retry("boom.Error", "again", delay=0)


def test_complete_and_failed_are_counted_per_queue(client: Client, clock: FrozenClock) -> None:
    for i, outcome in enumerate(["complete", "complete", "fail"]):
        run_one(client, "a", f"a{i}", outcome)
    run_one(client, "b", "b0", "fail")
    counts = client.status("a", "b")
    assert (counts["a"]["complete"], counts["a"]["failed"]) == (2, 1)
    assert (counts["b"]["complete"], counts["b"]["failed"]) == (0, 1)
    client.cancel("a0")
    client.unfail("boom.Error", "b", 10)
    counts = client.status("a", "b")
    assert (counts["a"]["complete"], counts["a"]["failed"]) == (1, 0)
    assert (counts["b"]["waiting"], counts["b"]["failed"]) == (2, 0)


def test_totals_add_up_and_survive_retention(client: Client, clock: FrozenClock) -> None:
    client.admin.config_set("jobs-history-count", 1)
    for i in range(3):
        run_one(client, "q", f"c{i}", "complete")
    run_one(client, "q", "r0", "retry")
    client.queue("q").pop(1, worker="w")[0].retry("boom.Error", "again", delay=0)  # no retry left
    counts = client.queue("q").counts()
    assert counts["complete"] == 1, "retention kept one"
    assert (counts["completed_total"], counts["failed_total"], counts["retried_total"]) == (3, 1, 1)
    clock.advance(86400 * 40)  # the day's statistics expire; the totals stay
    client.redis.delete(*client.redis.keys(client.keys.key("stats", queue="q", day="*")))
    assert client.queue("q").counts()["completed_total"] == 3


def test_oldest_waiting_age_follows_the_oldest_eligible_job(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    assert q.counts()["oldest_waiting_ms"] == 0
    q.put("a.b:c", {}, jid="urgent-later", priority=-5)
    clock.advance(2)
    q.put("a.b:c", {}, jid="old-domain", domain="x.com")
    q.put("a.b:c", {}, jid="delayed", delay=1)
    clock.advance(3)
    assert q.counts()["oldest_waiting_ms"] == 5000
    q.pop(1, worker="w")  # urgent-later goes: old-domain (3 s) and delayed (2 s) wait
    assert q.counts()["oldest_waiting_ms"] == 3000


def test_an_empty_queue_is_forgotten_with_its_keys(client: Client, clock: FrozenClock) -> None:
    run_one(client, "q", "done", "complete")
    client.queue("q").pause()
    assert client.admin.queue_known("q")
    assert client.admin.queue_forget("q") is True
    assert not client.admin.queue_known("q") and "q" not in client.queues()
    left = [k for k in client.redis.keys(client.keys.root + ":*") if b":q:" in k or b"q:q" in k]
    assert left == []
    assert client.get_job("done") is not None, "complete jobs stay until retention"
    assert client.admin.queue_forget("q") is False
    client.queue("q").put("a.b:c", {}, jid="again")
    assert client.queue("q").counts()["paused"] is False


@pytest.mark.parametrize(
    ("setup", "held"),
    [
        (lambda q: q.put("a.b:c", {}), "1 waiting"),
        (lambda q: q.put("a.b:c", {}, delay=60), "1 scheduled"),
        (lambda q: (q.put("a.b:c", {}), q.pop(1, worker="w")), "1 running"),
        (lambda q: q.client.scheduling.recur("q", "a.b:c", every=60), "1 recurring"),
    ],
)
def test_a_queue_that_is_not_empty_is_not_forgotten(
    client: Client, clock: FrozenClock, setup: object, held: str
) -> None:
    setup(client.queue("q"))  # type: ignore[operator]
    before = snapshot(client)
    with pytest.raises(WrongState, match=f"queue q is not empty \\({held}\\)"):
        client.admin.queue_forget("q")
    assert snapshot(client) == before


def test_a_queue_with_failed_jobs_is_not_forgotten(client: Client, clock: FrozenClock) -> None:
    run_one(client, "q", "f", "fail")
    with pytest.raises(WrongState, match="1 failed"):
        client.admin.queue_forget("q")


def test_workers_show_what_a_master_told_and_what_it_holds(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.put("myapp.jobs:send", {}, jid="j1")
    q.pop(1, worker="host-a-123")
    clock.advance(2.5)
    client.leases.register_worker(
        "host-a-123",
        host="host-a",
        pid=123,
        queues=["q", "r"],
        concurrency=4,
        started_ms=clock.now_ms - 60_000,
    )
    q.put("a.b:c", {}, jid="j2")
    q.pop(1, worker="elsewhere-77")
    clock.advance(1)
    found = client.admin.workers()
    assert list(found) == ["host-a-123", "elsewhere-77"] or list(found) == [
        "elsewhere-77",
        "host-a-123",
    ]
    told = found["host-a-123"]
    assert told == {
        "seen_ms": clock.now_ms - 1000,
        "jobs": ["j1"],
        "host": "host-a",
        "pid": 123,
        "queues": ["q", "r"],
        "concurrency": 4,
        "started_ms": clock.now_ms - 61_000,
        "records": 2,  # reads JSON and compact records (runtime.queue.job.RECORDS)
        "told": True,
        "running": [
            {
                "jid": "j1",
                "klass": "myapp.jobs:send",
                "queue": "q",
                "started_ms": clock.now_ms - 3500,
                "elapsed_ms": 3500,
            }
        ],
    }
    guessed = found["elsewhere-77"]
    assert (guessed["host"], guessed["pid"], guessed["queues"], guessed["concurrency"]) == (
        "elsewhere",
        77,
        ["q"],
        None,
    )
    assert guessed["told"] is False and guessed["running"][0]["elapsed_ms"] == 1000
    assert guessed["records"] is None


def test_a_pop_marks_its_worker_seen_at_most_once_a_second(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    q.pop(1, worker="w")
    first_ms = clock.now_ms
    clock.advance(0.4)
    q.pop(1, worker="w")
    functions = int(str(client.redis.info("server")["redis_version"]).split(".")[0]) >= 7
    expected = first_ms if functions else clock.now_ms  # scripts (EVALSHA) remember nothing
    assert client.admin.workers()["w"]["seen_ms"] == expected, "within a second: not written"
    clock.advance(0.6)
    q.pop(1, worker="w")
    assert client.admin.workers()["w"]["seen_ms"] == clock.now_ms
    clock.advance(0.1)
    assert client.conn.run("forget_worker", "w", "q") == 0
    assert client.admin.workers() == {}
    q.pop(1, worker="w")
    assert client.admin.workers()["w"]["seen_ms"] == clock.now_ms, "forgotten: seen again at once"


def test_worker_info_is_checked(client: Client, clock: FrozenClock) -> None:
    with pytest.raises(BadArgument, match="queues entry"):
        client.leases.register_worker("w", host="h", pid=1, queues=["a:b"], concurrency=1)
    with pytest.raises(BadArgument, match="pid"):
        client.leases.register_worker("w", host="h", pid=0, queues=["a"], concurrency=1)
    with pytest.raises(BadArgument, match="host"):
        client.leases.register_worker("w", host="two words", pid=5, queues=["a"], concurrency=1)
    assert client.admin.workers() == {}


def test_every_failed_job_of_a_group_is_deleted_but_those_others_wait_on(
    client: Client, clock: FrozenClock
) -> None:
    for i in range(5):
        run_one(client, "q", f"f{i}", "fail")
    client.queue("q").put("a.b:c", {}, jid="parent")
    client.queue("q").put("a.b:c", {}, jid="child", depends=["parent"])
    [parent] = client.queue("q").pop(1, worker="w")
    parent.fail("boom.Error", "it broke")  # child fails too, as runtime.DependencyFailed
    assert client.admin.delete_failed("boom.Error", batch=2) == 5
    assert client.failed() == {"boom.Error": 1, "runtime.DependencyFailed": 1}
    assert [j.jid for j in client.admin.failed_jobs("boom.Error")[1]] == ["parent"]


def test_domains_show_their_limit_throttled_jobs_and_next_start(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("slow.com", rate=1, period=60)
    client.set_domain_limit("idle.com", rate=5, period=1)
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"s{i}", domain="slow.com")
    q.pop(1, worker="w")
    assert client.admin.domains() == {
        "slow.com": {
            "limit": {"rate": 1, "period": 60, "burst": 0},
            "throttled": 2,
            "next_start_ms": clock.now_ms + 60_000,
            "slots": 1,
            "paused": False,
            "full": False,
        },
        "idle.com": {
            "limit": {"rate": 5, "period": 1, "burst": 0},
            "throttled": 0,
            "next_start_ms": None,
            "slots": 0,
            "paused": False,
            "full": False,
        },
    }
