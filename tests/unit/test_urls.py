"""The URL forms (runtime.queue.urls) and the route a cluster's calls follow
(runtime.queue.routing): parsing only, no Redis."""

from __future__ import annotations

import pytest
import redis
from redis._parsers.base import BaseParser

from runtime.errors import ConfigError, RedisCondition, RedisTransient
from runtime.queue import routing, urls
from runtime.queue.faults import classify


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_db() -> None:
    target = urls.parse("redis+sentinel://app:s%40cret@10.0.0.1:26380,10.0.0.2/main/3")
    assert target.kind == "sentinel"
    assert target.seeds == (("10.0.0.1", 26380), ("10.0.0.2", urls.SENTINEL_PORT))
    assert (target.service, target.db) == ("main", 3)
    assert (target.username, target.password) == ("app", "s@cret")
    assert target.sentinel_password is None


def test_sentinels_with_their_own_password_take_it_from_the_query() -> None:
    url = "redis+sentinel://:pw@h:1/main?sentinel_user=watch&sentinel_password=other"
    target = urls.parse(url)
    assert (target.password, target.db) == ("pw", 0)
    assert (target.sentinel_username, target.sentinel_password) == ("watch", "other")


def test_a_cluster_url_names_its_seed_nodes_and_db_0_only() -> None:
    target = urls.parse("redis+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001,[::1]")
    assert target.kind == "cluster"
    assert target.seeds == (("127.0.0.1", 7000), ("127.0.0.1", 7001), ("::1", 6379))
    assert target.node_url(("::1", 7002)) == "redis://u:p@[::1]:7002/0"
    with pytest.raises(ConfigError, match="db 0 only"):
        urls.parse("redis+cluster://h:7000/1")


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://h:26379",  # no service
        "redis+sentinel://h:26379/main/x",  # db not a number
        "redis+sentinel:///main",  # no host
        "redis+sentinel://h/main?password=x",  # an unknown option
        "redis+cluster://h:notaport",
    ],
)
def test_malformed_urls_are_refused_without_their_password(url: str) -> None:
    secret = "topsecretpw"
    with pytest.raises(ConfigError) as caught:
        urls.parse(url.replace("://", f"://u:{secret}@", 1))
    assert secret not in str(caught.value)


def test_plain_urls_are_left_to_redis_py() -> None:
    for url in ("redis://h:6379/0", "rediss://h", "unix:///tmp/r.sock"):
        assert urls.parse(url) == urls.Target(url, "server")


def test_a_cluster_route_follows_moved_and_falls_back_to_the_next_seed() -> None:
    route = routing.Route.of("redis+cluster://:pw@127.0.0.1:7000,127.0.0.1:7001")
    assert route.url == "redis://:pw@127.0.0.1:7000/0"
    moved = redis.exceptions.MovedError("1234 127.0.0.1:7002")
    assert routing.redirected([b"ok", moved]) == [1]
    assert route.follow(moved) and route.url == "redis://:pw@127.0.0.1:7002/0"
    assert route.lost() and route.url == "redis://:pw@127.0.0.1:7001/0"
    assert route.lost() and route.url == "redis://:pw@127.0.0.1:7000/0"


def test_a_sentinel_or_plain_route_never_changes() -> None:
    for url in ("redis+sentinel://h/main", "redis://h"):
        route = routing.Route.of(url)
        assert not route.follow(redis.exceptions.MovedError("1 h:2"))
        assert not route.lost() and route.url == url


@pytest.mark.parametrize(
    ("reply", "condition"),
    [
        ("ASK 1234 127.0.0.1:7002", RedisCondition.TRYAGAIN),
        ("MOVED 1234 127.0.0.1:7002", RedisCondition.MOVED),
        ("TRYAGAIN Multiple keys request during rehashing of slot", RedisCondition.TRYAGAIN),
        ("NOREPLICAS Not enough good replicas to write.", RedisCondition.NOREPLICAS),
    ],
)
def test_cluster_and_replica_refusals_are_transient(reply: str, condition: RedisCondition) -> None:
    error = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]  # as redis-py does
    found = classify(error, "redis+cluster://h:7000")
    assert isinstance(found, RedisTransient) and found.condition == condition


def test_reads_through_sentinel_carry_a_write_probe_that_a_stale_primary_refuses() -> None:
    sentinel = urls.parse("redis+sentinel://127.0.0.1:26379/main")
    plain = urls.parse("redis://127.0.0.1:6379/0")
    reads = [("FCALL_RO", "get_x", 1, "{ns}", "j1")]
    writes = [("FCALL", "pop_x", 1, "{ns}", "w")]
    assert routing.probed(plain, reads) == reads, "a plain server may be a replica on purpose"
    assert routing.probed(sentinel, writes) == writes, "writes are refused by themselves"
    sent = routing.probed(sentinel, reads)
    assert sent == [*reads, ("PERSIST", "{ns}")]
    assert routing.checked(sent, reads, ["job", 0]) == ["job"]
    refused = redis.exceptions.ResponseError("NOREPLICAS Not enough good replicas to write.")
    assert routing.checked(sent, reads, ["old job", refused]) == [refused]
    assert routing.stale(sentinel, routing.checked(sent, reads, ["old job", refused]))
