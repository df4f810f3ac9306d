"""De-duplication: unique keys, unique_for after completion, requeue_if_running,
and message_status's seven answers."""

from __future__ import annotations

import json
import threading
from typing import Any

from runtime import Client
from runtime.queue import ops
from runtime.queue.leases import Outcomes
from runtime.queue.waiting import WAIT_SLICE_S
from tests.conftest import record
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_for


def test_a_duplicate_is_not_created_while_the_original_is_queued_scheduled_or_running(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {"n": 1}, unique_key="report-42")
    assert q.put("a.b:c", {"n": 2}, unique_key="report-42") == first
    assert q.counts()["waiting"] == 1
    [job] = q.pop(1, worker="w")
    assert q.put("a.b:c", {}, unique_key="report-42") == first
    job.complete()
    second = q.put("a.b:c", {}, unique_key="report-42")
    assert second != first, "free again once complete"
    later = q.put("a.b:c", {}, unique_key="later", delay=60)
    assert q.put("a.b:c", {}, unique_key="later") == later


def test_duplicates_in_one_batch_collapse(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    jids = client.put_many([q.spec("a.b:c", {}, unique_key="k", jid=f"j{i}") for i in range(3)])
    assert jids == ["j0", "j0", "j0"]
    assert client.get_job("j1") is None


def test_unique_for_keeps_the_key_taken_after_completion(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="k", unique_for=30)
    q.pop(1, worker="w")[0].complete()
    assert client.message_status(first) == "done-with-backoff"
    assert q.put("a.b:c", {}, unique_key="k") == first
    assert 29_000 < client.redis.pttl(client.keys.key("unique", key="k")) <= 30_000
    brief = q.put("a.b:c", {}, unique_key="brief", unique_for=0.05)
    q.pop(1, worker="w")[0].complete()
    assert q.put("a.b:c", {}, unique_key="brief") == brief
    # the key's TTL runs on Redis's own clock, not the frozen one
    wait_for(lambda: not client.redis.exists(client.keys.key("unique", key="brief")), 5)
    assert q.put("a.b:c", {}, unique_key="brief") != brief
    assert client.message_status(brief) == "done-awaiting-gc"


def test_requeue_if_running_runs_exactly_once_more(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    jid = q.put("a.b:c", {}, unique_key="sync")
    [job] = q.pop(1, worker="w")
    assert client.message_status(jid) == "locked"
    for _ in range(3):
        assert q.put("a.b:c", {}, unique_key="sync", requeue_if_running=True) == jid
    assert client.message_status(jid) == "locked-with-requeue"
    assert job.complete() == "waiting"
    assert client.message_status(jid) == "queued"
    [again] = q.pop(1, worker="w")
    assert again.jid == jid
    assert again.complete() == "complete"
    assert q.pop(1, worker="w") == []
    events = [e.event for e in client.get_job(jid).history]  # type: ignore[union-attr]
    assert events == ["put", "popped", "completed", "popped", "completed"]


def test_a_failed_job_frees_its_key(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="k", retries=0)
    q.pop(1, worker="w")[0].fail("g", "m")
    assert q.put("a.b:c", {}, unique_key="k") != first


def test_a_cancelled_job_frees_its_key(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    first = q.put("a.b:c", {}, unique_key="k")
    client.cancel(first)
    assert q.put("a.b:c", {}, unique_key="k") != first


def test_message_status_answers(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    assert client.message_status("nope") is None
    waiting = q.put("a.b:c", {})
    assert client.message_status(waiting) == "queued"
    delayed = q.put("a.b:c", {}, delay=5)
    assert client.message_status(delayed) == "queued-with-backoff"
    [job] = q.pop(1, worker="w")
    job.retry("g", "m", delay=5)
    assert client.message_status(job.jid) == "queued-with-backoff"
    clock.advance(10)
    for popped in q.pop(5, worker="w"):
        popped.complete()
    assert client.message_status(delayed) == "done-awaiting-gc"


def test_the_jid_a_job_s_duplicate_put_returned_names_the_job_it_was_folded_into(
    client: Client, clock: FrozenClock, redis_server: RedisServer
) -> None:
    pages = client.queue("pages")
    held = pages.put("app.jobs:crawl", {"url": "a"}, unique_key="page:a")
    client.queue("q").put("app.jobs:crawl", {"url": "index"}, jid="index")
    [index] = client.queue("q").pop(1, worker="w")
    # what the index job's ctx.put calls returned: "dup" (page a is queued already),
    # "new" (page b), and "after" depending on the duplicate
    puts = [
        pages.spec("app.jobs:crawl", {"url": "a"}, unique_key="page:a", jid="dup"),
        pages.spec("app.jobs:crawl", {"url": "b"}, unique_key="page:b", jid="new"),
        pages.spec("app.jobs:report", {}, jid="after", depends=["dup"]),
    ]
    out = Outcomes()
    out.add_complete("index", index.token or "", puts=[p.to_wire() for p in puts])
    assert [client.conn.call(call) for _, call in ops.reports("w", out)] == [{"index": "complete"}]
    dup = client.get_job("dup")
    assert dup is not None and (dup.jid, dup.state) == (held, "waiting")
    assert client.get_job("new").jid == "new"  # type: ignore[union-attr]
    after = client.get_job("after")
    assert after is not None and (after.state, after.depends) == ("depends", (held,))
    ttl_ms = client.redis.pttl(client.keys.key("folded", jid="dup"))
    assert 7 * 86400_000 - 60_000 < ttl_ms <= 7 * 86400_000, "kept as long as completed jobs"

    waiter = Client.from_url(redis_server.url, namespace=client.keys.namespace)
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(waiter.wait("dup", timeout=10)))
    thread.start()
    wait_for(lambda: (record(client, held) or ({}, ""))[0].get("wn"), 10, what="a waiter")
    [job] = pages.pop(1, worker="w")
    assert job.jid == held
    job.complete(result={"links": 3})
    woken = wait_for(lambda: not thread.is_alive(), WAIT_SLICE_S / 2, what="woken, not timed out")
    waiter.close()
    assert woken and client.redis.llen(client.keys.waited(held)) == 0, "it took its wake-up"
    assert got == [{"links": 3}], "wait of the returned jid ends with the job it names"
    assert client.wait("dup", timeout=1) == {"links": 3}
    assert client.get_job("after").state == "waiting"  # type: ignore[union-attr]


def test_a_job_s_put_at_once_folds_too_and_a_client_s_duplicate_leaves_nothing(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    held = q.put("app.jobs:crawl", {}, unique_key="page:a")
    spec, data = q.spec("app.jobs:crawl", {}, unique_key="page:a", jid="now").to_wire()
    by_job = json.dumps({**json.loads(spec), "by": "parent"})  # as a master sends ctx.put(now=True)
    assert client.conn.run_json("put", by_job, data) == [held]
    assert client.get_job("now").jid == held  # type: ignore[union-attr]
    assert q.put("app.jobs:crawl", {}, unique_key="page:a", jid="mine") == held
    assert client.get_job("mine") is None, "the client was answered the holder's jid"
    assert not client.redis.exists(client.keys.key("folded", jid="mine"))
