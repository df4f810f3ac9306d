"""The master's children as its book sees them: one `Slot` per child index, with
its state, the jobs it holds (by jid) and why the master killed it, if it did.
A slot's state is its child's life (spawning, starting, ready, stopping); whether
it is busy is not stored beside it but read from the job the ledger files as
running in it (`Slot.busy`).

Pure: which slots to spawn, stop or retire follows from plain values (the wanted
number, the run mode, recent crashes). Processes and sockets live in
processes.py; this module only decides.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from runtime.children import protocol
from runtime.master import events
from runtime.master.reasons import Ending

CRASH_WINDOW_S, CRASHES_BEFORE_PAUSE, CRASH_PAUSE_S = 10.0, 5, 2.0


class SlotState(enum.Enum):
    SPAWNING = "spawning"  # asked of the fork server
    STARTING = "starting"  # forked, not ready yet
    READY = "ready"  # takes jobs: idle, or busy while a job runs in it (Slot.busy)
    STOPPING = "stopping"  # told to stop


@dataclass
class Slot:
    index: int
    generation: int  # the fork server (HUP count) it comes from
    state: SlotState = SlotState.SPAWNING
    pid: int | None = None
    # written only by the ledger (ledger.py):
    running: str | None = None  # jid of the job it runs
    queued: deque[str] = field(default_factory=deque)  # jids sent to run after it
    jobs_done: int = 0
    retire: bool = False  # takes no more jobs; stops when idle (recycling, HUP, fewer)
    kill: Ending | None = None  # why the master killed it (the first reason wins)
    rss_bytes: int = 0

    @property
    def busy(self) -> bool:
        """A job runs in it (the ledger files one there)."""
        return self.running is not None


class Slots:
    def __init__(self) -> None:
        self.by_index: dict[int, Slot] = {}
        self.generation = 0
        self.crashes: list[float] = []  # when children died young or holding a job

    def __len__(self) -> int:
        return len(self.by_index)

    def get(self, index: int, pid: int | None = None) -> Slot | None:
        slot = self.by_index.get(index)
        if slot is None or (pid is not None and slot.pid != pid):
            return None
        return slot

    def spawned(self, index: int, pid: int) -> None:
        """The fork server forked the slot's child: it starts."""
        slot = self.by_index.get(index)
        if slot is not None and slot.state is SlotState.SPAWNING:
            slot.pid, slot.state = pid, SlotState.STARTING

    def spawn_failed(self, index: int, now: float) -> None:
        self.by_index.pop(index, None)
        self.crashed(now)

    def rss(self, by_index: dict[int, int]) -> None:
        """The children's memory, as read by the loop."""
        for index, rss in by_index.items():
            if (slot := self.by_index.get(index)) is not None:
                slot.rss_bytes = rss

    def remove(self, slot: Slot) -> None:
        """The slot's child is gone (its jobs moved off it first: ledger.py)."""
        del self.by_index[slot.index]

    def all(self) -> list[Slot]:
        return list(self.by_index.values())

    def idle(self) -> list[Slot]:
        return [
            s
            for s in self.by_index.values()
            if s.state is SlotState.READY and s.running is None and not s.retire
        ]

    def idle_count(self) -> int:
        """len(idle()), without the list (asked several times a pass: a loop)."""
        count = 0
        for s in self.by_index.values():
            if s.state is SlotState.READY and s.running is None and not s.retire:
                count += 1
        return count

    def busy(self) -> list[Slot]:
        return [s for s in self.by_index.values() if s.running is not None]

    def any_busy(self) -> bool:
        """bool(busy()), without the list (asked every pass: a loop)."""
        for s in self.by_index.values():  # noqa: SIM110 - no generator every pass
            if s.running is not None:
                return True
        return False

    def accepting(self) -> list[Slot]:
        """Busy slots whose pipeline may take more jobs."""
        return [s for s in self.by_index.values() if s.running is not None and not s.retire]

    def ready(self, target: int) -> bool:
        """All wanted children are up (the master may say READY)."""
        states = [s.state for s in self.by_index.values()]
        return (
            len(states) >= target
            and all(s is not SlotState.STARTING for s in states)
            and (all(s is not SlotState.SPAWNING for s in states))
        )

    # --- decisions ----------------------------------------------------------------

    def stop(self, slot: Slot) -> list[events.Action]:
        """Tells an idle slot's child to exit."""
        if slot.running is None and slot.state in (SlotState.READY, SlotState.STARTING):
            slot.state = SlotState.STOPPING
            return [events.Post(slot.index, protocol.Stop())]
        return []

    def _settled(self, target: int) -> bool:
        """`target` children, none stopping or to retire (a loop: no generator)."""
        if len(self.by_index) != target:
            return False
        for slot in self.by_index.values():
            if slot.retire or slot.state is SlotState.STOPPING:
                return False
        return True

    def reconcile(self, target: int, running: bool, now: float) -> list[events.Action]:
        """Moves toward `target` children (none new unless `running`)."""
        if running and self._settled(target):
            return []  # every pass, nearly always: nothing to start or stop
        out: list[events.Action] = []
        if not running:
            for slot in self.all():
                if slot.running is None:
                    out += self.stop(slot)
            return out
        for slot in self.all():
            if slot.retire and slot.running is None:
                out += self.stop(slot)
        live = [s for s in self.all() if s.state is not SlotState.STOPPING and not s.retire]
        for slot in sorted(live, key=lambda s: -s.index)[: max(0, len(live) - target)]:
            out += self.stop(slot)
        if len(self.by_index) < target and self.pause_until(now) is None:
            for index in range(target):
                if index not in self.by_index:
                    self.by_index[index] = Slot(index, self.generation)
                    out.append(events.Spawn(index))
        return out

    def crashed(self, now: float) -> None:
        self.crashes.append(now)

    def pause_until(self, now: float) -> float | None:
        """When spawning may go on, while children keep dying young (None: now)."""
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S]
        if len(self.crashes) < CRASHES_BEFORE_PAUSE:
            return None
        until = self.crashes[-1] + CRASH_PAUSE_S
        return until if until > now else None

    def replaced(self, generation: int) -> list[events.Action]:
        """HUP: a new fork server; children of older ones go after their job."""
        self.generation = generation
        out: list[events.Action] = []
        for slot in self.all():
            if slot.generation < generation:
                slot.retire = True
                out += self.stop(slot)
        return out
