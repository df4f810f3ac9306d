"""Batches on the scripts alone (lua/lib/batch.lua): counts kept in the step
that ends each job, callbacks put once, at the right moment."""

from __future__ import annotations

import pytest

from runtime import BadArgument, Client, NoSuchJob
from runtime.queue.api.batches import Batch, BatchStatus, Callback
from tests.conftest import snapshot
from tests.support.clock import FrozenClock

DONE: Callback = ("cb", "app.jobs:done", {"tag": "x"})
FINALLY: Callback = ("cb", "app.jobs:finally", {})


def status(client: Client, bid: str) -> BatchStatus:
    found = client.get_batch(bid)
    assert found is not None
    return found


def counts(client: Client, bid: str) -> tuple[int, int, int, int]:
    s = status(client, bid)
    return s.total, s.pending, s.completed, s.failed


def callbacks(client: Client) -> list[tuple[str, dict[str, object]]]:
    """The callback jobs put so far, by klass, oldest first."""
    jobs = [j for j in client.queue("cb").peek(100)]
    return [(j.klass, j.data) for j in jobs]


def run(client: Client, queue: str, n: int, fail: bool = False) -> list[str]:
    leases = client.queue(queue).pop(n, worker="w")
    for lease in leases:
        if fail:
            lease.fail("app.Boom", "boom")
        else:
            lease.complete()
    return [lease.jid for lease in leases]


def test_fifty_jobs_five_failing_fire_on_complete_once_then_on_success_after_retry(
    client: Client, clock: FrozenClock
) -> None:
    b = client.batch(on_success=DONE, on_complete=FINALLY, description="fifty")
    b.put_many([b.queue("q").spec("app.jobs:work", {"i": i}) for i in range(50)])
    b.close()
    assert counts(client, b.bid) == (50, 50, 0, 0)
    run(client, "q", 45)
    assert callbacks(client) == []
    failed = run(client, "q", 5, fail=True)
    assert counts(client, b.bid) == (50, 0, 45, 5)
    bid = b.bid
    given = {"bid": bid, "total": 50, "completed": 45, "failed": 5}
    assert callbacks(client) == [("app.jobs:finally", given)]
    s = status(client, bid)
    assert s.complete_jid is not None and s.success_jid is None
    assert sorted(s.failed_jids) == sorted(failed)
    assert client.get_batch(bid).settled_ms is not None  # type: ignore[union-attr]
    assert client.retry_batch(bid) == 5
    assert counts(client, bid) == (50, 5, 45, 0)
    assert status(client, bid).settled_ms is None
    run(client, "q", 5)
    done = {"bid": bid, "total": 50, "completed": 50, "failed": 0, "tag": "x"}
    assert callbacks(client) == [("app.jobs:finally", given), ("app.jobs:done", done)]
    assert counts(client, bid) == (50, 0, 50, 0)


def test_unfail_moves_a_failed_batch_job_back_to_pending(
    client: Client, clock: FrozenClock
) -> None:
    b = client.batch(on_success=DONE, on_complete=FINALLY)
    b.queue("q").put("app.jobs:work", {}, retries=0)
    b.close()
    run(client, "q", 1, fail=True)
    assert counts(client, b.bid) == (1, 0, 0, 1)
    assert client.unfail("app.Boom", None, 10) == 1
    assert counts(client, b.bid) == (1, 1, 0, 0)
    run(client, "q", 1)
    assert [k for k, _ in callbacks(client)] == ["app.jobs:finally", "app.jobs:done"]


def test_no_callback_before_close_then_once_at_close(client: Client, clock: FrozenClock) -> None:
    b = client.batch(on_success=DONE, on_complete=FINALLY)
    b.queue("q").put("app.jobs:work", {})
    run(client, "q", 1)
    assert counts(client, b.bid) == (1, 0, 1, 0)
    assert callbacks(client) == []
    closed = b.close()
    assert closed.sealed and closed.success_jid and closed.complete_jid
    assert len(callbacks(client)) == 2
    b.close()
    assert len(callbacks(client)) == 2


def test_an_empty_batch_fires_both_callbacks_at_close(client: Client, clock: FrozenClock) -> None:
    b = client.batch(on_success=DONE, on_complete=FINALLY)
    b.close()
    assert [k for k, _ in callbacks(client)] == ["app.jobs:finally", "app.jobs:done"]


def test_cancelled_jobs_count_as_failed(client: Client, clock: FrozenClock) -> None:
    b = client.batch(on_success=DONE, on_complete=FINALLY)
    jids = b.put_many([b.queue("q").spec("app.jobs:work", {}) for _ in range(3)])
    b.close()
    client.cancel(jids[0])
    assert counts(client, b.bid) == (3, 2, 0, 1)
    assert status(client, b.bid).cancelled == 1
    run(client, "q", 2)
    assert [k for k, _ in callbacks(client)] == ["app.jobs:finally"]


def test_cancelling_an_ended_job_leaves_its_count(client: Client, clock: FrozenClock) -> None:
    b = client.batch()
    b.put_many([b.queue("q").spec("app.jobs:work", {}, retries=0) for _ in range(2)])
    [done] = run(client, "q", 1)
    [failed] = run(client, "q", 1, fail=True)
    client.cancel(done, failed)
    s = status(client, b.bid)
    assert (s.total, s.completed, s.failed, s.cancelled, s.failed_jids) == (2, 1, 1, 1, ())


def test_a_retried_job_counts_once_when_it_ends_for_good(
    client: Client, clock: FrozenClock
) -> None:
    b = client.batch(on_complete=FINALLY)
    b.queue("q").put("app.jobs:work", {}, retries=2)
    b.close()
    for _ in range(2):
        [lease] = client.queue("q").pop(1, worker="w")
        lease.retry("app.Boom", "again", delay=0)
        assert counts(client, b.bid) == (1, 1, 0, 0)
    run(client, "q", 1, fail=True)
    assert counts(client, b.bid) == (1, 0, 0, 1)


def test_a_repeated_report_counts_nothing_twice(client: Client, clock: FrozenClock) -> None:
    b = client.batch(on_complete=FINALLY)
    b.queue("q").put("app.jobs:work", {})
    b.put_many([b.queue("q").spec("app.jobs:work", {})])
    [first, second] = client.queue("q").pop(2, worker="w")
    first.complete()
    first.complete()
    assert counts(client, b.bid) == (2, 1, 1, 0)
    b.close()
    second.complete()
    assert counts(client, b.bid) == (2, 0, 2, 0)
    assert len(callbacks(client)) == 1


def test_a_batch_job_adds_jobs_with_its_completion(client: Client, clock: FrozenClock) -> None:
    b = client.batch(on_success=DONE)
    b.queue("q").put("app.jobs:parent", {})
    b.close()
    [parent] = client.queue("q").pop(1, worker="w")
    child = client.queue("q").spec("app.jobs:child", {}).in_batch(b.bid)
    client.leases.complete(parent.jid, "w", parent.token, puts=[child])
    assert counts(client, b.bid) == (2, 1, 1, 0)
    assert callbacks(client) == []
    run(client, "q", 1)
    assert [k for k, _ in callbacks(client)] == ["app.jobs:done"]


def test_a_sealed_batch_refuses_jobs_but_from_its_own(client: Client, clock: FrozenClock) -> None:
    b = client.batch()
    b.queue("q").put("app.jobs:work", {})
    b.close()
    before = snapshot(client)
    with pytest.raises(BadArgument, match="sealed"):
        b.queue("q").put("app.jobs:late", {})
    assert snapshot(client) == before
    other = client.batch()
    other.queue("o").put("app.jobs:work", {})
    [outsider] = client.queue("o").pop(1, worker="w")
    spec = client.queue("q").spec("app.jobs:x", {}).in_batch(b.bid)
    state = client.leases.complete(outsider.jid, "w", outsider.token, puts=[spec])
    assert state == "failed", "a put refused fails the job putting it (runtime.PutRefused)"
    assert counts(client, b.bid) == (1, 1, 0, 0)


def test_a_put_into_an_unknown_batch_is_refused(client: Client, clock: FrozenClock) -> None:
    with pytest.raises(BadArgument, match="no batch"):
        client.put_many([client.queue("q").spec("app.jobs:x", {}).in_batch("nope")])


def test_a_settled_batch_expires_after_jobs_history(client: Client, clock: FrozenClock) -> None:
    client.admin.config_set("jobs-history", 60)
    b = client.batch(on_complete=FINALLY)
    b.queue("q").put("app.jobs:work", {})
    b.close()
    assert status(client, b.bid).ttl_ms == -1
    run(client, "q", 1)
    assert 0 < status(client, b.bid).ttl_ms <= 60_000
    assert client.redis.zcard(client.keys.key("batches")) == 0


def test_close_of_an_unknown_batch_is_no_such_job(client: Client, clock: FrozenClock) -> None:
    with pytest.raises(NoSuchJob):
        Batch(client, "nope").close()
    assert client.get_batch("nope") is None


def test_a_lease_expiry_without_retries_fails_the_job_in_its_batch(
    client: Client, clock: FrozenClock
) -> None:
    client.admin.config_set("q-heartbeat", 5)
    b = client.batch(on_complete=FINALLY)
    b.queue("q").put("app.jobs:work", {}, retries=0)
    b.close()
    client.queue("q").pop(1, worker="w1")
    clock.advance(6)
    assert client.queue("q").pop(1, worker="w2") == []
    assert counts(client, b.bid) == (1, 0, 0, 1)
    assert len(callbacks(client)) == 1


def test_a_dependency_failure_counts_and_its_restore_reopens(
    client: Client, clock: FrozenClock
) -> None:
    b = client.batch(on_success=DONE, on_complete=FINALLY)
    [a, _] = b.put_many(
        [
            b.queue("q").spec("app.jobs:a", {}, jid="a", retries=0),
            b.queue("q").spec("app.jobs:b", {}, jid="b", depends=["a"]),
        ]
    )
    b.close()
    run(client, "q", 1, fail=True)
    assert counts(client, b.bid) == (2, 0, 0, 2)
    assert client.retry_batch(b.bid) >= 1
    assert counts(client, b.bid) == (2, 2, 0, 0)
    run(client, "q", 1)
    run(client, "q", 1)
    assert [k for k, _ in callbacks(client)] == ["app.jobs:finally", "app.jobs:done"]
    assert a == "a"


def test_the_same_open_again_changes_nothing_another_is_refused(
    client: Client, clock: FrozenClock
) -> None:
    callback = ['{"jid":"c1","queue":"cb","klass":"a.b:c"}', "{}"]
    args = ("b1", "d", *callback)
    client.conn.run("batch_open", *args, "", "")
    before = snapshot(client)
    client.conn.run("batch_open", *args, "", "")
    assert snapshot(client) == before
    with pytest.raises(BadArgument, match="exists"):
        client.conn.run("batch_open", "b1", "other", *callback, "", "")
    assert snapshot(client) == before


def test_callbacks_are_checked_at_open(client: Client, clock: FrozenClock) -> None:
    before = snapshot(client)
    with pytest.raises(BadArgument, match="bid"):
        client.batch(on_success=("cb", "app.jobs:x", {"bid": 1}))
    with pytest.raises(BadArgument, match="klass"):
        client.batch(on_success=("cb", "nodots", {}))
    with pytest.raises(BadArgument):
        client.batch(on_success=("cb", "app.jobs:x"))  # type: ignore[arg-type]
    assert snapshot(client) == before
