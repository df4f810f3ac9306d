"""What the parts of the master's book share: `Book` (book.py) holds the state;
`Intake` (intake.py) and `JobFlow` (jobs.py) are written against this declaration
of it, so each reads as a part of one book and a type checker sees every use."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime import config
    from runtime.master import events, reasons
    from runtime.master.held import Held
    from runtime.master.link import Link
    from runtime.master.slots import Slot, Slots
    from runtime.queue.leases import Outcomes


class BookState:
    if TYPE_CHECKING:  # the state lives in Book
        worker: config.WorkerSettings
        worker_id: str
        held: dict[str, Held]
        buffer: deque[str]
        confirming: list[str]
        timed: list[str]
        outcomes: Outcomes
        slots: Slots
        link: Link
        queues: list[str]
        exchanging: bool
        reports_since: float | None
        now: float
        waiting: bool
        want_work: bool
        wake_at: float | None
        registered: bool
        offset: float | None
        jobs_seen: int
        avg_run_s: float
        start_failure: str | None
        actions: list[events.Action]
        cancelled_reports: set[str]

        def accepting(self) -> bool: ...
        def room(self) -> int: ...
        def depth(self) -> int: ...
        def _urgent_room(self) -> int: ...
        def _pipeline_room(self, slot: Slot, depth: int) -> int: ...
        def _kill(self, slot: Slot, ending: reasons.Ending, sig: int = ...) -> None: ...
        def _noted(self) -> None: ...
        def _hold(self, held: Held) -> None: ...
        def _let_go(self, held: Held, ending: reasons.Ending) -> None: ...
