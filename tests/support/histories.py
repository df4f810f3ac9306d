"""How the ledger's state machines run (Hypothesis): a bounded, derandomized run in
the default test run (a few seconds), and the same histories, many more and longer,
under `slow` (./dev slow)."""

from __future__ import annotations

import unittest

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

HEALTH = [HealthCheck.too_slow]


def bounded(
    machine: type[RuleBasedStateMachine], examples: int, steps: int
) -> type[unittest.TestCase]:
    """The machine's test case for the default run: the same histories every time."""
    case = machine.TestCase
    case.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=HEALTH,
    )
    return case


def long(machine: type[RuleBasedStateMachine], steps: int) -> type[unittest.TestCase]:
    """A test case of its own (a subclass: settings belong to a class) for 5,000
    random histories of up to `steps` steps, marked slow."""
    longer: type[RuleBasedStateMachine] = type(f"Long{machine.__name__}", (machine,), {})
    case: type[unittest.TestCase] = pytest.mark.timeout(1800)(pytest.mark.slow(longer.TestCase))
    case.settings = settings(  # type: ignore[attr-defined]
        max_examples=5000, stateful_step_count=steps, deadline=None, suppress_health_check=HEALTH
    )
    return case
