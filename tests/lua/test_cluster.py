"""The Lua suite's lifecycle tests on a Redis Cluster of three primaries
(issue 21): the same tests, the client reaching the namespace's slot through
a redis+cluster:// URL (its first call finds the slot's owner by MOVED).
Each namespace hashes to its own slot, so the tests spread over the nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import Client
from tests.lua.test_lifecycle import (  # noqa: F401 - collected here, on the cluster
    test_expired_lease_makes_the_job_poppable_again_with_one_retry_spent,
    test_expired_lease_with_no_retries_left_fails_with_a_clear_group,
    test_lease_expired_but_not_reclaimed_is_already_lost,
    test_per_queue_heartbeat_sets_the_lease_length,
    test_public_job_fields_follow_the_record,
    test_put_pop_heartbeat_complete_timeline,
    test_put_stores_the_whole_record_and_a_put_event,
)
from tests.support.clock import FrozenClock
from tests.support.topologies import Cluster, cluster_client, running_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from running_cluster()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    """A client on the cluster in a namespace of its own, routed to its slot."""
    yield from cluster_client(cluster)


@pytest.fixture
def clock(client: Client) -> FrozenClock:
    return FrozenClock(client.redis, client.keys)


def test_namespaces_spread_over_the_nodes_and_reach_their_slot(cluster: Cluster) -> None:
    owners = set()
    for i in range(12):
        with Client.from_url(cluster.url(), namespace=f"spread{i}") as c:
            c.queue("q").put("tests.integration.jobs:ledger", {})
            assert c.status("q")["q"]["waiting"] == 1
            owners.add(c.conn.route.url)
    assert len(owners) == len(cluster.nodes)
