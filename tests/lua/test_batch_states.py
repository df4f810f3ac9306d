"""A batch's counts equal what its jobs' states say, after every step of random
histories over the real scripts (Hypothesis' stateful testing): puts into
batches, pops, completions (some putting jobs into their batch), retries,
failures, lease expiries, unfail, requeue, a batch's retry, cancels and
closes. Callbacks: none before the batch is sealed, each at most once, and
each once it is due."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from runtime import BadArgument, Client, DependedOn, LeaseLost, NoSuchJob, WrongState
from runtime.queue.api.holder import Lease
from runtime.vocabulary import JobState
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer

BATCHES = 2
CALLBACKS = "cb"  # the callbacks' queue: never popped


class BatchMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.client = Client.from_url(self.url, namespace="t" + uuid.uuid4().hex[:12])
        self.clock = FrozenClock(self.client.redis, self.client.keys)
        self.client.admin.config_set("q-heartbeat", 5)
        self.batches = [
            self.client.batch(
                on_success=(CALLBACKS, "app.jobs:success", {"n": n}),
                on_complete=(CALLBACKS, "app.jobs:complete", {"n": n}),
            )
            for n in range(BATCHES)
        ]
        self.sealed = [False] * BATCHES
        self.members: list[list[str]] = [[] for _ in range(BATCHES)]
        self.cancelled: dict[str, str] = {}  # jid -> the count it stays in
        self.held: dict[str, Lease] = {}
        self.serial = 0

    def teardown(self) -> None:
        self.client.close()

    def _jid(self) -> str:
        self.serial += 1
        return f"j{self.serial}"

    def _spec(self, n: int, retries: int, delay: bool, depends: list[str]) -> Any:
        q = self.client.queue("q")
        opts = {"jid": self._jid(), "retries": retries, "depends": depends}
        return q.spec("app.jobs:work", {}, delay=5 if delay else 0, **opts).in_batch(
            self.batches[n].bid
        )

    # --- rules ------------------------------------------------------------------------

    @rule(n=st.integers(0, BATCHES - 1), retries=st.sampled_from([0, 0, 1, 2]), delay=st.booleans(),
          dep=st.integers(0, 30), with_dep=st.booleans())  # fmt: skip
    def put(self, n: int, retries: int, delay: bool, dep: int, with_dep: bool) -> None:
        members = self.members[n]
        depends = [members[dep % len(members)]] if with_dep and members else []
        depends = [d for d in depends if d not in self.cancelled]
        spec = self._spec(n, retries, delay, depends)
        try:
            self.client.put_many([spec])
        except BadArgument:
            assert self.sealed[n], "only a sealed batch refuses a put"
            return
        assert not self.sealed[n]
        members.append(spec.options["jid"])

    @rule(count=st.integers(1, 4), worker=st.sampled_from(["w1", "w2"]))
    def pop(self, count: int, worker: str) -> None:
        for lease in self.client.queue("q").pop(count, worker=worker):
            self.held[lease.jid] = lease

    @rule(i=st.integers(0, 50), how=st.sampled_from(["complete", "fail", "fail", "retry", "put"]))
    def report(self, i: int, how: str) -> None:
        if not self.held:
            return
        jid = sorted(self.held)[i % len(self.held)]
        lease = self.held.pop(jid)
        with contextlib.suppress(LeaseLost, NoSuchJob):
            if how == "complete":
                lease.complete()
            elif how == "fail":
                lease.fail("app.Boom", "boom")
            elif how == "retry":
                lease.retry("app.Boom", "again", delay=0)
            else:
                self._complete_putting(lease)

    def _complete_putting(self, lease: Lease) -> None:
        """A job of a batch completes, adding a job to its batch (ctx.batch.put)."""
        n = next(n for n in range(BATCHES) if lease.jid in self.members[n])
        spec = self._spec(n, 0, False, [])
        state = self.client.leases.complete(lease.jid, lease.worker, lease.token, puts=[spec])
        if state == JobState.COMPLETE:
            self.members[n].append(spec.options["jid"])

    @rule()
    def expire_leases(self) -> None:
        self.clock.advance(6)
        self.held.clear()

    @rule()
    def unfail(self) -> None:
        for group in self.client.failed():
            with contextlib.suppress(BadArgument):
                self.client.unfail(group, None, 100)

    @rule(n=st.integers(0, BATCHES - 1))
    def retry_batch(self, n: int) -> None:
        self.client.retry_batch(self.batches[n].bid)

    @rule(n=st.integers(0, BATCHES - 1), i=st.integers(0, 50))
    def requeue(self, n: int, i: int) -> None:
        if self.members[n]:
            jid = self.members[n][i % len(self.members[n])]
            with contextlib.suppress(WrongState, NoSuchJob):
                self.client.scheduling.requeue(jid, None)

    @rule(n=st.integers(0, BATCHES - 1), i=st.integers(0, 50))
    def cancel(self, n: int, i: int) -> None:
        if not self.members[n]:
            return
        jid = self.members[n][i % len(self.members[n])]
        job = self.client.get_job(jid)
        if job is None or job.state == JobState.CANCELLED:
            return
        with contextlib.suppress(DependedOn):
            if self.client.cancel(jid) == [jid]:
                kept = "completed" if job.state == JobState.COMPLETE else "failed"
                self.cancelled[jid] = kept
                self.held.pop(jid, None)

    @rule(n=st.integers(0, BATCHES - 1))
    def close(self, n: int) -> None:
        self.batches[n].close()
        self.sealed[n] = True

    # --- what must hold after every step ------------------------------------------------

    @invariant()
    def counts_are_the_jobs_states(self) -> None:
        fired = self._callbacks()
        for n, b in enumerate(self.batches):
            status = self.client.get_batch(b.bid)
            assert status is not None
            jobs = dict(zip(self.members[n], self.client.get_jobs(self.members[n]), strict=True))
            complete = [j for j, job in jobs.items() if job and job.state == JobState.COMPLETE]
            failed = [j for j, job in jobs.items() if job and job.state == JobState.FAILED]
            gone = [  # deleted, or a tombstone (lua/cancel.lua)
                self.cancelled[j]
                for j, job in jobs.items()
                if job is None or job.state == JobState.CANCELLED
            ]
            assert len(gone) == sum(1 for j in self.members[n] if j in self.cancelled)
            want_completed = len(complete) + gone.count("completed")
            want_failed = len(failed) + gone.count("failed")
            got = (status.total, status.completed, status.failed, status.pending)
            want = (len(jobs), want_completed, want_failed,
                    len(jobs) - want_completed - want_failed)  # fmt: skip
            assert got == want, (n, got, want)
            assert sorted(status.failed_jids) == sorted(failed)
            assert status.sealed == self.sealed[n]
            success, complete_ = fired.get((n, "success"), 0), fired.get((n, "complete"), 0)
            assert success <= 1 and complete_ <= 1
            if not self.sealed[n]:
                assert success == complete_ == 0, "no callback before the batch is sealed"
            elif status.pending == 0:
                assert complete_ == 1
                assert success == 1 or status.failed > 0

    def _callbacks(self) -> dict[tuple[int, str], int]:
        fired: dict[tuple[int, str], int] = {}
        for job in self.client.queue(CALLBACKS).peek(100):
            key = (int(job.data["n"]), job.klass.rsplit(":", 1)[1])
            assert job.data["bid"] == self.batches[key[0]].bid
            fired[key] = fired.get(key, 0) + 1
        return fired


def _run(url: str, examples: int, steps: int) -> None:
    machine = type("Machine", (BatchMachine,), {"url": url})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            derandomize=examples < 100,  # the default run: the same histories every time
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


def test_batch_counts_follow_the_jobs_states(default_server: RedisServer) -> None:
    _run(default_server.url, examples=30, steps=40)  # more and longer under slow (below)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_batch_counts_follow_the_jobs_states_over_many_histories(
    default_server: RedisServer,
) -> None:
    _run(default_server.url, examples=500, steps=60)
