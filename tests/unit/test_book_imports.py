"""The master's book is pure by import too: loading it loads nothing that talks to
Redis or runs an event loop (docs/design.md, "A pure book")."""

from __future__ import annotations

import subprocess
import sys

import pytest

IMPURE = ("redis", "asyncio", "uvloop")
BOOK_MODULES = [
    "runtime.master.book",
    "runtime.master.ledger",
    "runtime.master.intake",
    "runtime.master.jobs",
    "runtime.master.handout",
    "runtime.master.renewals",
    "runtime.master.held",
    "runtime.master.capacity",
    "runtime.master.reports",
    "runtime.master.slots",
    "runtime.master.events",
    "runtime.master.reasons",
    "runtime.master.plan",
    "runtime.master.link",
]


@pytest.mark.parametrize("module", BOOK_MODULES)
def test_the_book_and_its_collaborators_load_no_redis_asyncio_or_uvloop(module: str) -> None:
    check = (
        f"import sys, {module}\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {IMPURE!r})\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_public_names_that_load_redis_still_come_on_first_use() -> None:
    check = (
        "import sys, runtime\n"
        "assert 'redis' not in sys.modules\n"
        "from runtime import Client, Lease, Queue\n"
        "assert Client.__name__ == 'Client' and Queue.__name__ == 'Queue'\n"
        "assert 'redis' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
