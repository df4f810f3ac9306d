"""The book's stateful tests can fail: each planted bug below, of a kind the one
record is meant to rule out, is found by the bounded run of test_book_states.py's
histories (the invariants after every event). A planted bug that passed would
mean the histories no longer reach what the invariants guard."""

from __future__ import annotations

import io
import unittest
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings

from runtime.master.held import Held, Where
from runtime.master.intake import Intake
from runtime.master.ledger import Ledger
from tests.unit.test_book_states import BookMachine


def _unstamped(move: Callable[..., Held]) -> Callable[..., Held]:
    """A move to RUNNING that forgets to stamp when the job started."""

    def planted(self: Ledger, jid: str, where: Where | None, *args: object, **kw: object) -> Held:
        before = self.held[jid].sent_at if jid in self.held else None
        held = move(self, jid, where, *args, **kw)
        if where is Where.RUNNING:
            held.sent_at = before
        return held

    return planted


def _kept_off_slot(move: Callable[..., Held]) -> Callable[..., Held]:
    """A withdrawal filed in the record but taken out of the slot's pipeline."""

    def planted(self: Ledger, jid: str, where: Where | None, *args: object, **kw: object) -> Held:
        held = move(self, jid, where, *args, **kw)
        if where is Where.WITHDRAWING and held.slot is not None:
            self.slots.by_index[held.slot].queued.remove(jid)
        return held

    return planted


def _lost_not_cancelled(cancel: Callable[[Ledger, Held], None]) -> Callable[[Ledger, Held], None]:
    """A cancel that forgets the lease is gone with it."""

    def planted(self: Ledger, held: Held) -> None:
        cancel(self, held)
        held.lost = False

    return planted


PLANTED: dict[str, list[Callable[..., Callable[..., object]]]] = {
    "move": [_unstamped, _kept_off_slot],
    "cancel": [_lost_not_cancelled],
}


def _cases() -> Iterator[tuple[str, Callable[..., object]]]:
    for name, plants in PLANTED.items():
        for plant in plants:
            yield name, plant


def _found() -> bool:
    """Whether the bounded run of the book's histories fails."""
    case: type[unittest.TestCase] = type("Planted", (BookMachine.TestCase,), {})
    case.settings = settings(  # type: ignore[attr-defined]
        max_examples=150,
        stateful_step_count=50,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        report_multiple_bugs=False,
        phases=[Phase.generate],  # found is enough: no shrinking
    )
    runner = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0)
    result = runner.run(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    return bool(result.failures or result.errors)


@pytest.mark.parametrize(("name", "plant"), list(_cases()), ids=lambda p: getattr(p, "__name__", p))
def test_the_book_histories_find_a_planted_bug(
    monkeypatch: pytest.MonkeyPatch, name: str, plant: Callable[..., object]
) -> None:
    monkeypatch.setattr(Ledger, name, plant(getattr(Ledger, name)))
    assert _found(), f"{plant.__name__} went unnoticed"


def test_the_book_histories_find_a_job_leased_again_taken_as_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The master's crash after a freeze (KeyError by jid): a pop or a hand-off
    that leases a job the master still holds, taken as a job it did not hold."""
    monkeypatch.setattr(Intake, "_leased_again", lambda self, leased, now: True)
    assert _found(), "a job leased again went unnoticed"
