"""Durations written for people, the one way the CLI, the dashboard and the logs
write them: a number and a unit that says what it is (ms, s, min, h, d), never a
bare letter ("1.4m" reads as metres or millions; this writes "1.4 min")."""

from __future__ import annotations

LARGE_UNITS = (("d", 86400.0), ("h", 3600.0), ("min", 60.0))  # largest first


def duration(seconds: float | None) -> str:
    """7 ms, 250 ms, 4.21 s, 12.5 s, 1.4 min, 3 min, 2.1 h, 1 d; "-" for None.
    Below a minute three significant digits, above it one decimal (none when
    whole)."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "-" + duration(-seconds)
    for unit, size_s in LARGE_UNITS:
        if seconds >= size_s:
            return f"{_one_decimal(seconds / size_s)} {unit}"
    in_ms = _three_digits(seconds * 1000)
    if seconds >= 1 or in_ms == "1000":
        return f"{_three_digits(seconds)} s"
    return f"{in_ms} ms"


def _three_digits(value: float) -> str:
    text = f"{value:.3g}"
    return f"{value:.0f}" if "e" in text else text  # 999.7: "1000", not "1e+03"


def _one_decimal(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")
