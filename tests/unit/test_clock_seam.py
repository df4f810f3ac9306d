"""The frozen clock is a test seam only: production code never writes it."""

from __future__ import annotations

import re
from pathlib import Path

import runtime

PACKAGE = Path(runtime.__file__).parent


def test_only_the_clock_library_reads_the_test_clock_and_nothing_writes_it() -> None:
    users = []
    for path in PACKAGE.rglob("*"):
        if path.suffix in (".py", ".lua") and "test_clock" in path.read_text():
            users.append(path.relative_to(PACKAGE).as_posix())
    assert sorted(users) == ["queue/keys.py", "queue/lua/lib/clock.lua"]
    clock_lua = (PACKAGE / "queue/lua/lib/clock.lua").read_text()
    calls = re.findall(r"redis\.call\('(\w+)', K\.test_clock", clock_lua)
    assert calls == ["GET"]


def test_the_test_clock_key_is_named_in_keys_and_nowhere_else_in_python() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.name != "keys.py":
            assert "test-clock" not in path.read_text(), path
