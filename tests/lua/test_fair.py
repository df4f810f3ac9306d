"""Fair shares (the queue setting `fair`, lib/lanes.lua): pops take a queue's
ready domains in rotation, so one domain's backlog delays another domain's
first job by at most one job per other active domain; priorities still come
first, and limits still hold."""

from __future__ import annotations

from runtime import Client
from runtime.queue.wire import JobSpec
from tests.lua.test_caps import jids, pop


def put_many(client: Client, queue: str, prefix: str, n: int, domain: str | None) -> None:
    for start in range(0, n, 1000):
        client.put_many(
            JobSpec.build(queue, "a.b:c", {}, jid=f"{prefix}{i}", domain=domain)
            for i in range(start, min(n, start + 1000))
        )


def test_a_fair_queue_starts_a_small_domain_among_a_large_backlog_at_once(
    client: Client,
) -> None:
    client.admin.config_set("q-fair", 1)
    put_many(client, "q", "a", 10_000, "a.com")
    put_many(client, "q", "b", 10, "b.com")
    started = [j for _ in range(20) for j in jids(pop(client, "q", count=1))]
    assert sorted(j for j in started if j.startswith("b")) == sorted(f"b{i}" for i in range(10))
    assert started[:4] == ["a0", "b0", "a1", "b1"]


def test_without_fair_the_backlog_goes_first(client: Client) -> None:
    put_many(client, "q", "a", 30, "a.com")
    put_many(client, "q", "b", 3, "b.com")
    assert jids(pop(client, "q", count=20)) == [f"a{i}" for i in range(20)]


def test_a_fair_pop_of_many_rotates_over_every_ready_domain(client: Client) -> None:
    client.admin.config_set("q-fair", 1)
    put_many(client, "q", "a", 5, "a.com")
    put_many(client, "q", "b", 2, "b.com")
    put_many(client, "q", "n", 2, None)
    got = jids(pop(client, "q", count=9))
    assert got == ["a0", "b0", "n0", "a1", "b1", "n1", "a2", "a3", "a4"]
    assert client.queue("q").counts()["waiting"] == 0
    assert client.redis.exists(client.keys.key("prios", queue="q")) == 0


def test_a_fair_queue_keeps_priorities_and_caps(client: Client) -> None:
    client.admin.config_set("q-fair", 1)
    client.set_domain_limit("a.com", concurrency=1)
    put_many(client, "q", "a", 3, "a.com")
    put_many(client, "q", "b", 3, "b.com")
    client.queue("q").put("a.b:c", {}, jid="urgent", priority=-1, domain="b.com")
    assert jids(pop(client, "q", count=5)) == ["urgent", "a0", "b0", "b1", "b2"]


def test_a_new_domain_joins_the_rotation_one_turn_of_the_others_later(client: Client) -> None:
    client.admin.config_set("q-fair", 1)
    put_many(client, "q", "a", 5, "a.com")
    put_many(client, "q", "b", 5, "b.com")
    assert jids(pop(client, "q", count=2)) == ["a0", "b0"]
    client.queue("q").put("a.b:c", {}, jid="c0", domain="c.com")
    assert jids(pop(client, "q", count=4)) == ["a1", "b1", "c0", "a2"]
