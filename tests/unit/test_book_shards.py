"""A book serving two namespaces (shards) with one set of children: each shard pops
its own queues, the children's room is shared, every job is renewed and
reported in the namespace it came from, and a namespace out of reach stops and
fences its own jobs only."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from runtime.children import protocol
from runtime.config import WorkerSettings
from runtime.errors import RedisCondition
from runtime.master import events, plan
from runtime.master.book import Book
from runtime.master.held import STOP_REPORT_WAIT_S, TICK_S, Where
from runtime.queue.leases import Leased, Outcomes, Popped
from tests.unit.test_book import LEASE_S, Rig, leased, of, only, runs

DOWN = RedisCondition.CONNECTION


def job(jid: str, queue: str) -> Leased:
    return dataclasses.replace(leased(jid), queue=queue)


class Served(Rig):
    """Namespace "na" serves queue qa (shard 0), "nb" queue qb (shard 1)."""

    def __init__(self, concurrency: int = 2, **options: Any) -> None:
        super().__init__(concurrency, **options)
        worker = WorkerSettings(
            modules=("m",), queues=("qa", "qb"), concurrency=concurrency, **options
        )
        shards = [("na", ("qa",)), ("nb", ("qb",))]
        self.book = Book(worker, "host-1", random.Random(7), shards=shards)

    def answer(self, exchange: events.Exchange, *jobs: Leased) -> list[events.Action]:
        popped = None if exchange.pop is None else Popped(list(jobs), None, [], None)
        self.apply(
            events.Exchanged(
                exchange.outcomes,
                exchange.pop,
                {},
                popped,
                self.now,
                self.now,
                shard=exchange.shard,
            )
        )
        return self.step()


def pops_of(actions: list[events.Action]) -> dict[int, events.Exchange]:
    return {a.shard: a for a in of(actions, events.Exchange) if a.pop is not None}


def test_each_shard_pops_its_queues_into_the_shared_room_and_reports_to_its_namespace() -> None:
    rig = Served(prefetch=0)
    rig.start()
    first = pops_of(rig.step())
    assert len(first) == 1, "one pop takes the room: the other shard's would ask for nothing"
    [(shard, pop)] = first.items()
    assert pop.queues == (("qa",), ("qb",))[shard] and pop.pop == 2
    mine, other = ("a", "qa") if shard == 0 else ("b", "qb"), 1 - shard
    actions = rig.answer(pop, job(mine[0], mine[1]))  # one job: the rest of the room is free
    second = pops_of(actions)
    assert set(second) == {other} and second[other].pop == 1, "the other shard asks the rest"
    assert second[other].queues == (("qa",), ("qb",))[other]
    theirs = ("b", "qb") if other == 1 else ("a", "qa")
    rig.answer(second[other], job(theirs[0], theirs[1]))
    assert rig.where("a") is Where.RUNNING and rig.where("b") is Where.RUNNING
    assert {rig.book.ledger.held[j].shard for j in "ab"} == {0, 1}
    slot_a, slot_b = rig.book.ledger.held["a"].slot, rig.book.ledger.held["b"].slot
    assert slot_a is not None and slot_b is not None
    rig.say(slot_a, protocol.Done("a"))
    rig.say(slot_b, protocol.Done("b"))
    for book_shard in rig.book.shards:
        book_shard.intake.want_work = False  # the queues are empty: only the reports go
    sent: dict[int, list[str]] = {}
    for _ in range(10):
        for exchange in of(rig.later(0.01), events.Exchange):
            sent.setdefault(exchange.shard, []).extend(exchange.outcomes.jids("complete"))
            rig.answer(exchange)
    assert sent == {0: ["a"], 1: ["b"]}, "each completion goes to its own namespace"
    assert rig.book.ledger.held == {}


def run_one_in_each_shard(rig: Served) -> None:
    """Job a (shard 0, qa) and b (shard 1, qb) running on the two children."""
    rig.start()
    actions = rig.step()
    for _ in range(2):
        for shard, pop in pops_of(actions).items():
            actions = rig.answer(pop, job("a", "qa") if shard == 0 else job("b", "qb"))
    assert rig.where("a") is Where.RUNNING and rig.where("b") is Where.RUNNING


def test_a_namespace_out_of_reach_fences_its_own_jobs_and_the_other_goes_on() -> None:
    rig = Served(prefetch=0)
    run_one_in_each_shard(rig)
    slot_a, slot_b = rig.book.ledger.held["a"].slot, rig.book.ledger.held["b"].slot
    assert slot_a is not None and slot_b is not None
    kills: list[events.Kill] = []
    renewed_a = 0
    while not kills and rig.now < 1000.0 + LEASE_S:
        actions = rig.later(TICK_S / 4)
        kills = of(actions, events.Kill)
        for renew in of(actions, events.Renew):
            if renew.shard == 0:
                assert set(renew.leases) == {"a"}, "a shard renews its own jobs only"
                rig.apply(events.Renewed(renew.leases, frozenset(), rig.now, shard=0))
                renewed_a += 1
            else:
                assert set(renew.leases) == {"b"}
                rig.apply(events.RenewFailed(renew.leases, DOWN, "reset", rig.now, shard=1))
        for exchange in of(actions, events.Exchange):
            if exchange.shard == 0:
                rig.answer(exchange)
            else:
                rig.apply(events.ExchangeFailed(exchange.outcomes, DOWN, "reset", rig.now, 1))
    assert [k.index for k in kills] == [slot_b], "b's child is stopped, a's is not"
    assert rig.now >= plan.kill_at(1000.0 + LEASE_S, LEASE_S)
    assert renewed_a >= 1 and rig.book.shards[0].link.up and not rig.book.shards[1].link.up
    assert "nb:connection" in rig.book.describe()
    rig.exit(slot_b, sig=9)
    assert rig.book.shards[1].reports.outcomes.release == {"b": "tok-b"}, "given back in nb"
    assert not rig.book.shards[0].reports.outcomes
    # na goes on: a completes and is reported there while nb is still out of reach
    rig.say(slot_a, protocol.Done("a"))
    reported: list[str] = []
    for _ in range(20):
        actions = rig.later(0.01)
        for exchange in of(actions, events.Exchange):
            if exchange.shard == 0:
                reported += exchange.outcomes.jids("complete")
                rig.answer(exchange)
            else:
                assert "a" not in exchange.outcomes.jids("complete")
                rig.apply(events.ExchangeFailed(exchange.outcomes, DOWN, "reset", rig.now, 1))
        for renew in of(actions, events.Renew):
            rig.apply(events.RenewFailed(renew.leases, DOWN, "reset", rig.now, shard=renew.shard))
    assert reported == ["a"] and rig.where("a") is None


def test_a_handed_job_of_a_namespace_out_of_reach_holds_back_no_other_job() -> None:
    """A job handed to shard 1 waits for its confirming renewal, which cannot come
    while nb is out of reach: once its short first lease ran out it is not this
    master's (Redis gives it to the next pop), and shard 0's jobs take the child."""
    rig = Served(concurrency=1, prefetch=0)
    rig.start()
    actions = rig.step()
    while pops := pops_of(actions):
        for pop in pops.values():
            actions = rig.answer(pop)  # nothing: both shards wait
    assert {w.shard for w in of(actions, events.Wait)} == {0, 1}
    for book_shard in rig.book.shards:
        book_shard.intake.offset = 0.0
    expires_us = round((rig.now + 1.0) * 1e6)
    handed = dataclasses.replace(job("h", "qb"), handed=True, expires_us=expires_us)
    rig.apply(events.WaitEnded(handed, shard=1))
    assert rig.where("h") is Where.CONFIRMING
    rig.apply(events.WaitEnded(shard=0))  # a wake-up in qa: shard 0 pops
    started: list[tuple[int, str]] = []
    while not started:
        assert rig.now < 1000.0 + 1.0 + 2 * TICK_S, "shard 0 waited for nb"
        actions = rig.later(0.05)
        for renew in of(actions, events.Renew):
            assert renew.shard == 1 and set(renew.leases) == {"h"}
            rig.apply(events.RenewFailed(renew.leases, DOWN, "reset", rig.now, shard=1))
        for wait in of(actions, events.Wait):
            assert wait.shard == 0, "nb is out of reach: no blocking read there"
            rig.apply(events.WaitEnded(key="{na}:wake:qa", shard=0))  # a job waits in qa
        for shard, pop in pops_of(actions).items():
            if shard == 0:
                actions = rig.answer(pop, *[job("a", "qa")][: pop.pop])
                started += runs(actions)
            else:
                rig.apply(events.ExchangeFailed(pop.outcomes, DOWN, "reset", rig.now, 1))
    assert started == [(0, "a")] and rig.where("h") is None
    assert not rig.book.shards[1].reports.outcomes, "nothing said of h: it never started"


def test_a_stopping_master_reports_what_it_can_and_waits_no_longer_for_a_lost_namespace() -> None:
    rig = Served(prefetch=0)
    run_one_in_each_shard(rig)
    slot_a, slot_b = rig.book.ledger.held["a"].slot, rig.book.ledger.held["b"].slot
    assert slot_a is not None and slot_b is not None
    rig.say(slot_a, protocol.Done("a"))
    rig.say(slot_b, protocol.Done("b"))
    rig.apply(events.Signalled(events.Intent.DRAIN))
    stopped_at = rig.now
    reported: dict[int, list[str]] = {}
    while not rig.book.done(rig.now):
        assert rig.now < stopped_at + STOP_REPORT_WAIT_S + 1.0
        actions = rig.later(0.05)
        for exchange in of(actions, events.Exchange):
            if exchange.shard == 0:
                reported.setdefault(0, []).extend(exchange.outcomes.jids("complete"))
                popped = None if exchange.pop is None else Popped([], None, [], None)
                rig.apply(
                    events.Exchanged(
                        exchange.outcomes, exchange.pop, {}, popped, rig.now, rig.now, shard=0
                    )
                )
            else:
                rig.apply(events.ExchangeFailed(exchange.outcomes, DOWN, "reset", rig.now, 1))
        for renew in of(actions, events.Renew):
            if renew.shard == 0:
                rig.apply(events.Renewed(renew.leases, frozenset(), rig.now, shard=0))
            else:
                rig.apply(events.RenewFailed(renew.leases, DOWN, "reset", rig.now, shard=1))
        assert not of(actions, events.Wait)
    assert reported == {0: ["a"]}
    assert rig.now >= stopped_at + STOP_REPORT_WAIT_S, "waited for nb as for one namespace"
    assert list(rig.book.ledger.held) == ["b"]


def test_one_shard_is_the_book_of_one_namespace() -> None:
    """Without shards the book is as it always was: one shard, shard 0 everywhere."""
    rig = Rig()
    assert len(rig.book.shards) == 1 and rig.book.shards[0].intake is rig.book.intake
    rig.start()
    exchange = only(rig.step(), events.Exchange)
    assert exchange.shard == 0 and exchange.queues == ("q",)
    assert isinstance(exchange.outcomes, Outcomes)
