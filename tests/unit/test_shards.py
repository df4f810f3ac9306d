"""The sharded site's rule (runtime.queue.shards): parsing, routing, refusals."""

from __future__ import annotations

import pytest

from runtime import config
from runtime.errors import BadArgument, ConfigError, CrossShard
from runtime.queue.shards import Shards


def test_a_rule_maps_queues_to_namespaces_and_the_rest_to_the_star() -> None:
    shards = Shards.parse("ns1:a,b; ns2:c ;ns3:*")
    assert shards.namespaces == ("ns1", "ns2", "ns3")
    assert [shards.namespace_of(q) for q in ("a", "b", "c", "d")] == ["ns1", "ns1", "ns2", "ns3"]
    assert shards.split(["d", "a", "c", "b"]) == {"ns1": ("a", "b"), "ns2": ("c",), "ns3": ("d",)}
    assert shards.sharded


def test_without_a_star_other_queues_live_in_the_first_namespace() -> None:
    assert Shards.parse("x:a;y:b").namespace_of("other") == "x"


def test_an_empty_rule_is_one_namespace_that_checks_nothing() -> None:
    shards = Shards.of(config.Settings(namespace="solo"))
    assert shards.namespaces == ("solo",) and not shards.sharded
    shards.check("solo", "anything")


@pytest.mark.parametrize(
    "rule",
    ["nocolon", "bad name:a", "x:a;x:b", "x:a;y:a", "x:*;y:*", "x:a b", ";;"],
)
def test_a_malformed_rule_is_a_config_error(rule: str) -> None:
    with pytest.raises(ConfigError):
        Shards.parse(rule)


def test_a_queue_of_another_shard_is_refused_naming_both() -> None:
    shards = Shards.parse("ns1:a;ns2:b")
    shards.check("ns1", "a")
    with pytest.raises(CrossShard, match=r"shard 'ns1'.*'b' of shard 'ns2'") as raised:
        shards.check("ns1", "b")
    assert isinstance(raised.value, BadArgument)
    shards.check("elsewhere", "b")  # a namespace outside the site is not checked


def test_the_rule_comes_from_the_environment() -> None:
    settings = config.load_settings(env={"RUNTIME_SHARDS": "p:a;q:b"})
    assert Shards.of(settings).namespace_of("b") == "q"
