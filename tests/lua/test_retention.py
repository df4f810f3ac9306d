"""Retention of completed jobs: by age and by count, on completion and on pops,
whatever is stored in the settings; never after a call that completed nothing."""

from __future__ import annotations

import pytest

from runtime import Client, ConfigError, LeaseLost
from runtime.config import LIMITS, SHARED
from tests.conftest import snapshot
from tests.support.clock import FrozenClock


def finish(client: Client, queue: str, jids: list[str]) -> None:
    for jid in jids:
        client.queue(queue).put("a.b:c", {}, jid=jid)
        [job] = client.queue(queue).pop(1, worker="w")
        assert job.complete() == "complete"


def kept(client: Client) -> int:
    return int(client.redis.zcard(client.keys.key("completed")))


INTEGER_SETTINGS = ["jobs-history-count", "max-data-bytes", "size-warning", "domain-burst"]


@pytest.mark.parametrize("name", INTEGER_SETTINGS)
def test_count_settings_refuse_fractions_and_store_nothing(client: Client, name: str) -> None:
    assert SHARED[name].integer
    with pytest.raises(ConfigError, match="whole number"):
        client.admin.config_set(name, "2.5")
    assert client.redis.hgetall(client.keys.key("config")) == {}
    assert client.admin.config_set(name, "1e3") == 1000


def test_a_fractional_count_stored_by_other_means_rounds_down_and_completes_whole(
    client: Client, clock: FrozenClock
) -> None:
    client.redis.hset(client.keys.key("config"), "jobs-history-count", "1.5")
    finish(client, "q", ["j1", "j2", "j3"])
    assert kept(client) == 1
    assert client.get_job("j3") is not None and client.get_job("j1") is None


def test_a_complete_whose_every_item_is_rejected_deletes_no_old_job(
    client: Client, clock: FrozenClock
) -> None:
    finish(client, "q", ["j1", "j2", "j3"])
    client.queue("q").put("a.b:c", {}, jid="j4")
    [job] = client.queue("q").pop(1, worker="w")
    client.admin.config_set("jobs-history-count", 1)
    before = snapshot(client)
    with pytest.raises(LeaseLost):
        client.leases.complete("j4", "w", "0" * 24)
    outcomes = client.leases.complete_many("w", {"j4": "0" * 24, "nope": "0" * 24})
    assert [type(v).__name__ for v in outcomes.values()] == ["LeaseLost", "NoSuchJob"]
    assert snapshot(client) == before
    assert job.complete() == "complete"
    assert kept(client) == 1


def test_pops_remove_jobs_older_than_jobs_history_when_none_complete(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("jobs-history", 3600)
    finish(client, "q", ["old"])
    clock.advance(3601)
    assert client.queue("elsewhere").pop(1, worker="w") == []
    assert client.get_job("old") is None and kept(client) == 0


def test_pops_trim_to_jobs_history_count_a_bounded_batch_at_a_time(
    client: Client, clock: FrozenClock
) -> None:
    batch = LIMITS["retention_pop_batch"]
    client.put_many(client.queue("q").spec("a.b:c", {}, jid=f"j{i:02d}") for i in range(batch + 7))
    jobs = client.queue("q").pop(batch + 7, worker="w")
    assert set(client.leases.complete_many("w", {j.jid: j.token or "" for j in jobs}).values()) == {
        "complete"
    }
    client.admin.config_set("jobs-history-count", 2)
    client.queue("q").pop(1, worker="w")
    assert kept(client) == 7, "one pop deletes one batch"
    client.queue("q").pop(1, worker="w")
    assert kept(client) == 2
    newest = [f"j{i:02d}" for i in range(batch + 5, batch + 7)]
    assert all(client.get_job(jid) is not None for jid in newest)
