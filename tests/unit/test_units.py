"""Durations for people: a number and a unit that says what it is, the one way
the CLI, the dashboard and the logs write them."""

from __future__ import annotations

import pytest

from runtime.units import duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0 ms"),
        (0.0004, "0.4 ms"),
        (0.007, "7 ms"),
        (0.25, "250 ms"),
        (0.9996, "1 s"),  # rounds up into the next unit, not to "1000 ms"
        (1, "1 s"),
        (4.213, "4.21 s"),
        (12.5, "12.5 s"),
        (60, "1 min"),
        (84, "1.4 min"),
        (180, "3 min"),
        (7500, "2.1 h"),
        (86400, "1 d"),
        (129600, "1.5 d"),
        (-84, "-1.4 min"),
    ],
)
def test_a_duration_names_its_unit(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_no_duration_is_a_bare_letter_that_reads_as_metres_or_millions() -> None:
    for seconds in (0.001, 0.5, 5, 90, 5400, 200000):
        number, unit = duration(seconds).split(" ")
        assert unit in ("ms", "s", "min", "h", "d") and float(number) > 0
