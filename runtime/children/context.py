"""The job context: the one argument a job's callable receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(repr=False)
class JobContext:
    """What a job sees of itself. `sandbox` is its own directory, emptied after it."""

    jid: str
    klass: str
    queue: str
    data: dict[str, Any]
    attempt: int
    retries: int
    remaining: int
    sandbox: Path
    _beat: Callable[[], None] = field(repr=False)

    def __repr__(self) -> str:  # never data: reprs end up in logs and error reports
        return f"JobContext(jid={self.jid!r}, klass={self.klass!r}, attempt={self.attempt})"

    def heartbeat(self) -> None:
        """Tells the master "still alive": resets the job's timeout."""
        self._beat()
