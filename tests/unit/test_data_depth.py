"""The client's checks of job data and options before they are sent: the depth
rule the scripts share (LIMITS["data_depth_max"]), walked without recursion,
and text that cannot be sent as UTF-8; each a one-line BadArgument."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from runtime import BadArgument
from runtime.config import LIMITS
from runtime.queue import wire
from runtime.queue.wire import JobSpec

DEPTH_MAX = LIMITS["data_depth_max"]


def levels(n: int) -> dict[str, Any]:
    """A dict `n` levels deep (a dict holding only scalars is one level), dicts
    and lists in turn."""
    value: Any = {"leaf": None}
    for i in range(n - 1):
        value = {"d": value} if (n - 2 - i) % 2 == 0 else [value]
    assert isinstance(value, dict)
    return value


def one_line_refusal(data: Any) -> str:
    with pytest.raises(BadArgument) as caught:
        wire.encode_data(data)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_depth_counts_dicts_and_lists_from_the_data_itself() -> None:
    assert not wire.nested_deeper_than({}, 1)
    assert wire.nested_deeper_than({"a": {}}, 1)
    assert wire.nested_deeper_than({"a": [1]}, 1)
    assert not wire.nested_deeper_than({"a": [1, {"b": 2}], "c": "x" * 10}, 3)
    assert wire.nested_deeper_than({"a": [1, {"b": {}}]}, 3)
    assert not wire.nested_deeper_than({"a": (1, (2,))}, 3)


def test_data_at_the_limit_is_encoded_and_one_level_more_is_refused() -> None:
    data = levels(DEPTH_MAX)
    assert json.loads(wire.encode_data(data)) == data
    refusal = one_line_refusal(levels(DEPTH_MAX + 1))
    assert refusal == f"data is nested deeper than {DEPTH_MAX} levels (data_depth_max)"


def test_data_deeper_than_the_interpreter_can_recurse_is_refused_without_recursion_error() -> None:
    deep = levels(sys.getrecursionlimit() * 5)
    assert "nested deeper than" in one_line_refusal(deep)


def test_data_that_contains_itself_is_refused() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert "nested deeper than" in one_line_refusal(loop)


@pytest.mark.parametrize(
    "data",
    [{"text": "\ud800"}, {"\udfff": 1}, {"a": ["ok", {"b": "x\udc80y"}]}],
)
def test_lone_surrogates_are_refused_with_one_clear_line(data: dict[str, Any]) -> None:
    assert "a lone surrogate: not valid Unicode text" in one_line_refusal(data)


def test_json_failures_are_one_line_bad_arguments() -> None:
    assert one_line_refusal({"s": {1, 2}}).startswith("data is not JSON: ")
    assert one_line_refusal({"n": float("nan")}).startswith("data is not JSON: ")
    assert one_line_refusal([1, 2]).startswith("data must be a JSON object")


def test_text_of_every_plane_is_encoded_as_is() -> None:
    assert wire.encode_data({"t": "é € 𝄞"}) == '{"t":"é € 𝄞"}'


def test_options_that_cannot_be_sent_as_utf8_are_refused_before_sending() -> None:
    spec = JobSpec.build("q", "a.b:c", {}, tags=["ok", "bad\ud800"])
    with pytest.raises(BadArgument, match=r"options holds \\ud800, a lone surrogate"):
        spec.to_wire()
    spec = JobSpec.build("q", "a.b:c", {}, jid="j\udfff")
    with pytest.raises(BadArgument, match="lone surrogate"):
        spec.to_wire()
    assert JobSpec.build("q", "a.b:c", {"x": 1}, jid="j1").to_wire()[1] == '{"x":1}'
