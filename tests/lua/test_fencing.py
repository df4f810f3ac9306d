"""Only the lease holder may report; anyone else changes nothing. Reports
repeated after they succeeded (a client retrying after a lost reply) answer
success and change nothing."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from runtime import Client, Lease, LeaseLost, NoSuchJob
from tests.conftest import raw_record, snapshot
from tests.support.clock import FrozenClock


@pytest.fixture
def leased(client: Client, clock: FrozenClock) -> Lease:
    client.queue("q").put("a.b:c", {"x": 1}, jid="j1")
    [job] = client.queue("q").pop(1, worker="holder")
    return job


REPORTS: dict[str, Callable[[Client, str, str], object]] = {
    "heartbeat": lambda c, w, t: c.leases.heartbeat(w, {"j1": t}, strict=True),
    "complete": lambda c, w, t: c.leases.complete("j1", w, t),
    "complete-next": lambda c, w, t: c.leases.complete("j1", w, t, next="other"),
    "fail": lambda c, w, t: c.leases.fail("j1", w, t, "g", "m"),
    "retry": lambda c, w, t: c.leases.retry("j1", w, t, "g", "m", delay=0),
    "progress": lambda c, w, t: c.leases.progress("j1", w, t, 1, 2, "half"),
    "complete-with-puts": lambda c, w, t: c.leases.complete(
        "j1", w, t, result={"ok": 1}, output="out", puts=[c.queue("n").spec("a.b:c", jid="kid")]
    ),
    "fail-with-output": lambda c, w, t: c.leases.fail("j1", w, t, "g", "m", output="out"),
}


@pytest.mark.parametrize("report", REPORTS.values(), ids=REPORTS.keys())
@pytest.mark.parametrize(
    ("worker", "token"),
    [("holder", "0" * 24), ("intruder", None), ("intruder", "0" * 24)],
    ids=["wrong-token", "wrong-worker", "both-wrong"],
)
def test_reports_from_anyone_but_the_holder_raise_lease_lost_and_change_nothing(
    client: Client,
    leased: Lease,
    report: Callable[[Client, str, str], object],
    worker: str,
    token: str | None,
) -> None:
    before = snapshot(client)
    with pytest.raises(LeaseLost):
        report(client, worker, token or leased.token or "")
    assert snapshot(client) == before


@pytest.mark.parametrize("report", REPORTS.values(), ids=REPORTS.keys())
def test_reports_after_the_lease_was_reclaimed_change_nothing(
    client: Client, clock: FrozenClock, leased: Lease, report: Callable[[Client, str, str], object]
) -> None:
    clock.advance(61)
    [again] = client.queue("q").pop(1, worker="other-host")
    before = snapshot(client)
    with pytest.raises(LeaseLost):
        report(client, "holder", leased.token or "")
    assert snapshot(client) == before
    assert again.complete() == "complete"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("complete", "complete"),
        ("complete-with-puts", "complete"),
        ("fail-with-output", "failed"),
        ("complete-next", "waiting"),
        ("fail", "failed"),
        ("retry", "waiting"),
    ],
)
def test_a_report_repeated_with_the_same_token_answers_and_changes_nothing(
    client: Client, leased: Lease, name: str, expected: str
) -> None:
    report = REPORTS[name]
    assert report(client, "holder", leased.token or "") == expected
    after_first = snapshot(client)
    assert report(client, "holder", leased.token or "") == expected
    assert snapshot(client) == after_first


def test_a_different_report_after_success_is_lease_lost(client: Client, leased: Lease) -> None:
    leased.complete()
    stored = raw_record(client, "j1")
    with pytest.raises(LeaseLost):
        leased.fail("g", "m")
    assert raw_record(client, "j1") == stored


def test_reports_on_a_cancelled_job(client: Client, leased: Lease) -> None:
    client.cancel("j1")
    assert client.leases.heartbeat("holder", {"j1": leased.token or ""}).lost == ("j1",)
    with pytest.raises(NoSuchJob):
        leased.complete()


def test_batched_complete_reports_each_job_on_its_own(client: Client, clock: FrozenClock) -> None:
    q = client.queue("q")
    for i in range(3):
        q.put("a.b:c", {}, jid=f"j{i}")
    jobs = q.pop(3, worker="w")
    args = ["w"]
    for job in jobs:
        args += [job.jid, (job.token or "") if job.jid != "j1" else "bad", "{}", "", "", ""]
    reply = client.conn.run_json("complete", *args)
    assert [r.get("state") or r["error"] for r in reply] == ["complete", "LEASE_LOST", "complete"]
    assert client.get_job("j1").state == "running"  # type: ignore[union-attr]


ITEM_ERRORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "complete-next-with-colon": ("complete", (json.dumps({"next": "a:b"}),)),
    "complete-next-with-blank": ("complete", (json.dumps({"next": "a b"}),)),
    "complete-delay-negative": ("complete", (json.dumps({"next": "n", "delay_ms": -5}),)),
    "complete-delay-nan": ("complete", ('{"next": "n", "delay_ms": NaN}',)),
    "complete-delay-nan-text": ("complete", (json.dumps({"next": "n", "delay_ms": "NaN"}),)),
    "complete-delay-inf": ("complete", ('{"next": "n", "delay_ms": 1e999}',)),
    "complete-delay-without-next": ("complete", (json.dumps({"delay_ms": 5}),)),
    "complete-depends-on-itself": ("complete", (json.dumps({"next": "n", "depends": ["j1"]}),)),
    "complete-options-not-json": ("complete", ("{next}",)),
    "complete-puts-not-a-list": ("complete", (json.dumps({"puts": 5}),)),
    "complete-put-not-a-pair": ("complete", (json.dumps({"puts": [["{}"]]}),)),
    "complete-put-not-text": ("complete", (json.dumps({"puts": [[{}, "{}"]]}),)),
    "complete-too-many-puts": ("complete", (json.dumps({"puts": [["{}", "{}"]] * 1001}),)),
    "complete-note-not-text": ("complete", (json.dumps({"note": 5}),)),
    "progress-done-negative": ("progress", ("-1", "", "")),
    "progress-done-nan": ("progress", ("nan", "", "")),
    "progress-done-missing": ("progress", ("", "", "")),
    "progress-total-text": ("progress", ("1", "lots", "")),
    "progress-total-inf": ("progress", ("1", "inf", "")),
    "fail-empty-group": ("fail", ("", "m")),
    "fail-group-with-blanks": ("fail", ("a b", "m")),
    "retry-empty-group": ("retry", ("", "m", "0")),
    "retry-group-with-blanks": ("retry", ("a b", "m", "0")),
    "retry-delay-negative": ("retry", ("g", "m", "-5")),
    "retry-delay-nan": ("retry", ("g", "m", "nan")),
    "retry-delay-inf": ("retry", ("g", "m", "inf")),
    "complete-usage-not-numbers": ("complete", ("{}", "", "", "fast 12")),
    "fail-usage-negative": ("fail", ("g", "m", "", "-1 12")),
    "retry-usage-one-number": ("retry", ("g", "m", "0", "", "1.5")),
}


# values a row of each report takes after its jid and token; those a case leaves
# out (result, output, usage) are sent empty
ROW = {"complete": 4, "fail": 4, "retry": 5}


@pytest.mark.parametrize(("op", "rest"), ITEM_ERRORS.values(), ids=ITEM_ERRORS.keys())
def test_a_malformed_report_item_answers_bad_arg_and_changes_nothing(
    client: Client, leased: Lease, op: str, rest: tuple[str, ...]
) -> None:
    before = snapshot(client)
    tail = ("",) * (ROW.get(op, len(rest)) - len(rest))
    reply = client.conn.run_json(op, "holder", "j1", leased.token or "", *rest, *tail)
    assert [(r["jid"], r["error"]) for r in reply] == [("j1", "BAD_ARG")], reply
    assert "\n" not in reply[0]["message"]
    assert snapshot(client) == before
    assert leased.complete() == "complete", "the lease is intact"


def test_no_read_of_a_job_carries_its_lease_token(client: Client, clock: FrozenClock) -> None:
    """The token is the holder's credential: only the lease replies (pop, exchange,
    a hand-off) carry it; the reads answer every job without it, running or
    not, its last token kept in the record or not."""
    q = client.queue("q")
    for jid in ("run", "done", "bad", "back"):
        q.put("a.b:c", {}, jid=jid, retries=0, tags=["t"])
    leases = {lease.jid: lease for lease in q.pop(4, worker="holder")}
    leases["done"].complete()
    leases["bad"].fail("g", "m")
    leases["back"].release()  # waiting again, its last token still in its record
    stored = json.loads((raw_record(client, "back") or b"").decode().partition("\n")[0])
    assert stored["l"] == leases["back"].token
    replies = {
        "get": client.conn.run_json("get", "run", "done", "bad", "back"),
        **{
            f"jobs-{state}": client.conn.run_json("jobs", "q", state, 0, 10, "newest")["jobs"]
            for state in ("running", "complete", "failed", "waiting")
        },
        "peek": client.conn.run_json("peek", "q", 10),
        "failed": client.conn.run_json("failed", "g", 0, 10)["jobs"],
    }
    metas = {name: [job["meta"] for job in jobs] for name, jobs in replies.items()}
    assert all(metas.values()), metas
    assert [name for name, of in metas.items() if any("l" in meta for meta in of)] == []
