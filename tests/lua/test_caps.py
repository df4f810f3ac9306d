"""Concurrency caps and paused domains under a frozen clock (lib/domains.lua):
a capped domain leases at most its cap, every end of a lease gives its slot
back, a full or paused domain's lanes wait in the throttled set for no time
(pops never look at them) and come back the moment a slot frees or it
resumes, and a cap combines with a rate."""

from __future__ import annotations

import contextlib
import json
import warnings
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime import Client, LeaseLost
from runtime.dashboard.app import create_app
from runtime.metrics import make_registry
from tests.support.clock import FrozenClock

S = 1_000_000
HELD_US = 9e15  # lib/due.lua: Due.HELD, the score of a lane no time frees


def pop(client: Client, *queues: str, count: int = 100, worker: str = "w") -> list[Any]:
    """The jobs the pop script leased (left holding their leases)."""
    reply: dict[str, Any] = client.conn.run_json(
        "pop", worker, count, "seed", "ordered", 0, 0, *queues
    )
    return list(reply["jobs"])


def pop_reply(client: Client, *queues: str, count: int = 100) -> dict[str, Any]:
    reply: dict[str, Any] = client.conn.run_json(
        "pop", "w", count, "seed", "ordered", 0, 0, *queues
    )
    return reply


def jids(jobs: list[Any]) -> list[str]:
    return [j["jid"] for j in jobs]


def slots(client: Client, domain: str) -> int:
    raw = client.redis.hget(client.keys.key("domain_slots"), domain)
    return int(raw) if raw is not None else 0


def throttled_score(client: Client, queue: str, lane: str) -> float | None:
    score: Any = client.redis.zscore(client.keys.key("throttled", queue=queue), lane)
    return None if score is None else float(score)


def ready_domains(client: Client, queue: str, prio: int = 0) -> list[str]:
    key = client.keys.key("ready", queue=queue, prio=prio)
    found: Any = client.redis.zrange(key, 0, -1)
    return [m.decode() for m in found]


def put_jobs(client: Client, queue: str, prefix: str, n: int, domain: str | None) -> None:
    for i in range(n):
        client.queue(queue).put("a.b:c", {"i": i}, jid=f"{prefix}{i}", domain=domain)


def test_a_capped_domain_leases_at_most_its_cap_and_the_rest_wait_throttled(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("api.com", concurrency=2)
    put_jobs(client, "q", "c", 5, "api.com")
    put_jobs(client, "q", "f", 2, None)
    assert jids(pop(client, "q")) == ["c0", "c1", "f0", "f1"]
    assert slots(client, "api.com") == 2
    assert client.queue("q").counts() == {
        "waiting": 0, "throttled": 3, "scheduled": 0, "running": 4, "stalled": 0,
        "depends": 0, "complete": 0, "failed": 0, "cancelled": 0, "paused": False,
        "oldest_waiting_ms": 0,
        "completed_total": 0, "failed_total": 0, "retried_total": 0, "size_warning": 0,
    }  # fmt: skip
    job = client.get_job("c2")
    assert job is not None
    assert (job.state, job.attempt, job.remaining, job.worker) == ("throttled", 0, 5, None)
    assert [e.event for e in job.history] == ["put"], "waiting for a slot spends nothing"
    assert throttled_score(client, "q", "0|api.com") == HELD_US
    assert ready_domains(client, "q") == []
    reply = pop_reply(client, "q")
    assert reply["jobs"] == [] and reply["wake_in_ms"] > 0, "no time frees a full domain"
    assert reply["wake_in_ms"] == 60_000, "only the leases' expiry is due"


def end_lease(client: Client, clock: FrozenClock, how: str, job: dict[str, Any]) -> None:
    jid, token = job["jid"], job["meta"]["l"]
    leases = client.leases
    if how == "complete":
        leases.complete(jid, "w", token)
    elif how == "fail":
        leases.fail(jid, "w", token, "G", "failed")
    elif how == "retry":
        leases.retry(jid, "w", token, "G", "again", delay=0)
    elif how == "release":
        leases.release(jid, "w", token)
    elif how == "cancel":
        client.cancel(jid)
    else:  # its lease runs out and a pop reclaims it
        clock.advance(61)


@pytest.mark.parametrize("how", ["complete", "fail", "retry", "release", "cancel", "expiry"])
def test_every_end_of_a_lease_gives_its_slot_back_at_once(
    client: Client, clock: FrozenClock, how: str
) -> None:
    client.set_domain_limit("api.com", concurrency=1)
    put_jobs(client, "q", "c", 3, "api.com")
    [first] = pop(client, "q")
    assert first["jid"] == "c0" and slots(client, "api.com") == 1
    end_lease(client, clock, how, first)
    if how != "expiry":
        assert slots(client, "api.com") == 0
        assert ready_domains(client, "q") == ["api.com"], "the held lane is ready again"
    [second] = pop(client, "q")
    expected = {"release": "c0", "expiry": "c0"}.get(how, "c1")
    assert second["jid"] == expected, "a job given back goes first again; a retry goes last"
    assert slots(client, "api.com") == 1
    assert pop(client, "q") == []


def test_a_job_reclaimed_with_no_retries_left_frees_its_slot(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("api.com", concurrency=1)
    client.queue("q").put("a.b:c", {}, jid="once", domain="api.com", retries=0)
    client.queue("q").put("a.b:c", {}, jid="next", domain="api.com")
    assert jids(pop(client, "q")) == ["once"]
    clock.advance(61)
    assert jids(pop(client, "q")) == ["next"]
    job = client.get_job("once")
    assert job is not None and job.state == "failed"
    assert job.failure is not None and job.failure.group == "runtime.LeaseExpired"
    assert slots(client, "api.com") == 1


def test_a_cap_holds_across_queues_and_workers(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("db", concurrency=3)
    put_jobs(client, "a", "a", 4, "db")
    put_jobs(client, "b", "b", 4, "db")
    got = pop(client, "a", count=2, worker="w1") + pop(client, "b", count=5, worker="w2")
    assert jids(got) == ["a0", "a1", "b0"]
    assert throttled_score(client, "a", "0|db") == HELD_US
    assert throttled_score(client, "b", "0|db") == HELD_US
    client.leases.complete("b0", "w2", got[2]["meta"]["l"])
    assert ready_domains(client, "a") == ["db"] and ready_domains(client, "b") == ["db"]
    assert jids(pop(client, "b", "a", worker="w2")) == ["b1"]
    assert pop(client, "a", worker="w1") == []


def test_rate_and_concurrency_combine(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("both.com", rate=1, period=1, concurrency=2)
    put_jobs(client, "q", "j", 5, "both.com")
    [j0] = pop(client, "q")
    assert pop(client, "q") == [], "the rate: one a second"
    clock.advance(1)
    [j1] = pop(client, "q")
    clock.advance(1)
    assert pop(client, "q") == [], "two run: the cap, though the rate allows one"
    assert throttled_score(client, "q", "0|both.com") == HELD_US
    client.leases.complete(j0["jid"], "w", j0["meta"]["l"])
    [j2] = pop(client, "q")
    assert j2["jid"] == "j2"
    client.leases.complete(j1["jid"], "w", j1["meta"]["l"])
    assert pop(client, "q") == [], "a slot is free, but the rate is spent"
    score = throttled_score(client, "q", "0|both.com")
    assert score == clock.now_us + S
    clock.advance(1)
    assert jids(pop(client, "q")) == ["j3"]


def test_a_cap_lowered_under_the_running_jobs_starts_none_until_under_it(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("api.com", concurrency=3)
    put_jobs(client, "q", "c", 5, "api.com")
    held = pop(client, "q")
    assert len(held) == 3
    client.set_domain_limit("api.com", concurrency=1)
    assert throttled_score(client, "q", "0|api.com") == HELD_US
    for job in held[:2]:
        client.leases.complete(job["jid"], "w", job["meta"]["l"])
        assert pop(client, "q") == []
    client.leases.complete(held[2]["jid"], "w", held[2]["meta"]["l"])
    assert jids(pop(client, "q")) == ["c3"]


def test_a_cap_set_while_jobs_run_counts_them(client: Client, clock: FrozenClock) -> None:
    put_jobs(client, "q", "c", 4, "api.com")
    held = pop(client, "q", count=2)
    assert slots(client, "api.com") == 2, "every domain's leases are counted"
    client.set_domain_limit("api.com", concurrency=2)
    assert pop(client, "q") == []
    client.leases.complete(held[0]["jid"], "w", held[0]["meta"]["l"])
    assert jids(pop(client, "q")) == ["c2"]


def test_clearing_a_cap_readies_the_held_lanes(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("api.com", concurrency=1)
    put_jobs(client, "q", "c", 3, "api.com")
    pop(client, "q")
    assert client.conn.run("domain_limit", "api.com", "") == 1, "the queue is woken"
    assert jids(pop(client, "q")) == ["c1", "c2"]
    assert slots(client, "api.com") == 3


def test_a_paused_domain_starts_nothing_and_others_run(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("api.com", rate=100, concurrency=5)
    client.scheduling.pause_domain("api.com")
    put_jobs(client, "q", "p", 2, "api.com")
    put_jobs(client, "q", "o", 2, "other.com")
    assert jids(pop(client, "q")) == ["o0", "o1"]
    assert client.queue("q").counts()["throttled"] == 2
    assert throttled_score(client, "q", "0|api.com") == HELD_US
    assert client.scheduling.domain_limits()["api.com"] == {
        "rate": 100, "period": 1, "burst": 0, "concurrency": 5, "paused": True,
    }  # fmt: skip
    client.set_domain_limit("api.com", concurrency=1)  # a new limit keeps the pause
    assert pop(client, "q") == []
    client.scheduling.resume_domain("api.com")
    assert client.scheduling.domain_limits()["api.com"] == {"concurrency": 1}
    assert jids(pop(client, "q")) == ["p0"]


def test_pausing_a_domain_without_limits_leaves_no_record_after_resume(
    client: Client, clock: FrozenClock
) -> None:
    put_jobs(client, "q", "p", 1, "x.com")
    client.scheduling.pause_domain("x.com")
    assert pop(client, "q") == []
    client.scheduling.resume_domain("x.com")
    assert client.scheduling.domain_limits() == {}
    assert jids(pop(client, "q")) == ["p0"]


def test_the_domains_listing_shows_slots_in_use(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("api.com", concurrency=2)
    put_jobs(client, "q", "c", 3, "api.com")
    pop(client, "q")
    listed = client.conn.run_json("domains", 10)
    assert listed == {
        "api.com": {
            "limit": {"concurrency": 2}, "throttled": 1, "next_start_ms": None,
            "slots": 2, "paused": False, "full": True,
        }
    }  # fmt: skip


def test_a_held_lane_costs_a_pop_no_reads_of_it(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("api.com", concurrency=1)
    put_jobs(client, "q", "c", 50, "api.com")
    pop(client, "q")
    client.redis.config_resetstat()
    for _ in range(5):
        assert pop(client, "q") == []
    stats: Any = client.redis.info("commandstats")
    for command in ("cmdstat_lindex", "cmdstat_llen", "cmdstat_hget", "cmdstat_lpop"):
        assert command not in stats, f"{command}: a pop looked at the held lane"
    assert stats["cmdstat_lrange"]["calls"] == 5, "one a pop: its hand-off list (handoff.lua)"


def test_a_corrupt_or_stray_lease_end_never_frees_a_slot_twice(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("api.com", concurrency=1)
    put_jobs(client, "q", "c", 2, "api.com")
    [job] = pop(client, "q")
    client.leases.complete(job["jid"], "w", job["meta"]["l"])
    with contextlib.suppress(LeaseLost):
        client.leases.complete(job["jid"], "w", job["meta"]["l"])  # repeated: ok, no change
    assert slots(client, "api.com") == 0
    assert jids(pop(client, "q")) == ["c1"]
    assert slots(client, "api.com") == 1


def test_metrics_show_each_domains_slots_in_use_and_cap(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("api.com", concurrency=2)
    client.set_domain_limit("idle.com", concurrency=4)
    put_jobs(client, "q", "c", 3, "api.com")
    put_jobs(client, "q", "o", 1, "other.com")
    pop(client, "q")
    text = generate_latest(make_registry(client)).decode()
    samples = {
        (s.name, tuple(s.labels.values())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("runtime_domain_")
    }
    assert samples == {
        ("runtime_domain_slots_in_use", ("api.com",)): 2,
        ("runtime_domain_slots_in_use", ("idle.com",)): 0,
        ("runtime_domain_slots_in_use", ("other.com",)): 1,
        ("runtime_domain_concurrency_limit", ("api.com",)): 2,
        ("runtime_domain_concurrency_limit", ("idle.com",)): 4,
    }


def test_the_dashboard_shows_slots_in_use_and_pauses(client: Client, clock: FrozenClock) -> None:
    client.set_domain_limit("api.com", concurrency=2)
    client.scheduling.pause_domain("held.com")
    put_jobs(client, "q", "c", 3, "api.com")
    put_jobs(client, "q", "h", 1, "held.com")
    pop(client, "q")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's test client warns about httpx
        from starlette.testclient import TestClient  # noqa: PLC0415 - its import warns

        with TestClient(create_app(client, registry=None), base_url="http://localhost") as http:
            page = http.get("/domains").text
    assert "the default rate, at most 2 at once" in page
    assert '<td class="num slots">2 / 2</td>' in page
    assert "when a slot frees" in page
    assert "(paused)" in page and "when resumed" in page


def test_a_lease_taken_by_an_earlier_release_gives_back_no_slot(
    client: Client, clock: FrozenClock
) -> None:
    client.set_domain_limit("api.com", concurrency=2)
    put_jobs(client, "q", "c", 3, "api.com")
    old, new = pop(client, "q", count=2)
    jobs_key = client.keys.key("jobs")
    raw: Any = client.redis.hget(jobs_key, old["jid"])
    meta_text, data = raw.decode().split("\n", 1)
    meta = json.loads(meta_text)
    assert meta.pop("sl") == 1, "a lease that took a slot says so"
    client.redis.hset(jobs_key, old["jid"], json.dumps(meta, separators=(",", ":")) + "\n" + data)
    client.redis.hincrby(client.keys.key("domain_slots"), "api.com", -1)  # as if never taken
    client.leases.complete(old["jid"], "w", old["meta"]["l"])
    assert slots(client, "api.com") == 1, "only the slot it took goes back"
    client.leases.complete(new["jid"], "w", new["meta"]["l"])
    assert slots(client, "api.com") == 0
