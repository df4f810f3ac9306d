"""A master's Outcomes (issue 12 rows) and the calls that send them, without Redis."""

from __future__ import annotations

import json

import pytest

from runtime.errors import BadArgument
from runtime.queue import ops, wire
from runtime.queue.leases import Outcomes

SPEC = wire.JobSpec.build("links", "app.jobs:crawl", {"u": 1}, jid="k1")


def test_add_complete_with_nothing_else_sends_the_old_row_with_empty_fields() -> None:
    out = Outcomes()
    out.add_complete("j1", "t1")
    assert out.complete == {"j1": ("j1", "t1", "{}", "", "", "")}
    [(kind, call)] = ops.reports("w", out)
    assert (kind, call.args) == ("complete", ("w", "j1", "t1", "{}", "", "", ""))


def test_a_completion_carries_result_output_note_and_puts() -> None:
    out = Outcomes()
    out.add_complete(
        "j1",
        "t1",
        result='{"ok":true}',
        output="x" * 70_000 + "END",
        note="é" * 2000,
        puts=[SPEC.to_wire()],
    )
    _, _, options, result, output, _ = out.complete["j1"]
    decoded = json.loads(options)
    assert decoded["puts"] == [SPEC.to_wire()]
    assert decoded["note"] == "é" * 512, "cut to note_max_bytes, whole characters"
    assert result == '{"ok":true}'
    assert output.endswith("END") and len(output.encode()) <= 64 * 1024
    assert output.startswith("[... cut ")


def test_retry_and_fail_rows_end_with_the_output_then_the_usage() -> None:
    out = Outcomes()
    out.add_retry("j1", "t1", "g", "m", 250, output="out", usage=wire.usage_text(0.5, 30.25))
    out.add_fail("j2", "t2", "g", "m", usage=wire.usage_text(1, 2, of_job=False))
    assert out.retry == [("j1", "t1", "g", "m", 250, "out", "0.5000 30.2")]
    assert out.fail == [("j2", "t2", "g", "m", "", "1.0000 2.0 c")]
    assert [kind for kind, _ in ops.reports("w", out)] == ["retry", "fail"]


def test_usage_not_measured_goes_as_nothing() -> None:
    assert wire.usage_text(None, None) == ""
    assert wire.usage_text(-0.001, 12) == "0.0000 12.0", "a clock step back is no negative"


def test_progress_keeps_the_latest_per_job_and_goes_in_one_call() -> None:
    out = Outcomes()
    out.add_progress("j1", "t1", 1, 10, "one")
    out.add_progress("j1", "t1", 2, 10, "two")
    out.add_progress("j2", "t2", 0.5, None, None)
    assert len(out) == 2
    call = ops.progress("w", out.progress.values())
    assert call.args == ("w", "j1", "t1", "2", "10", "two", "j2", "t2", "0.5", "", "")
    assert call.repeatable


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "3", True, 1e16])
def test_progress_that_is_not_a_count_is_refused_when_added(bad: object) -> None:
    out = Outcomes()
    with pytest.raises(BadArgument):
        out.add_progress("j1", "t1", bad, None, None)  # type: ignore[arg-type]
    with pytest.raises(BadArgument):
        out.add_progress("j1", "t1", 1, bad, None)  # type: ignore[arg-type]
    assert len(out) == 0


def test_puts_at_once_go_one_call_per_job_putting_them_with_its_jid() -> None:
    out = Outcomes()
    out.add_put(*SPEC.to_wire(), by="parent")
    out.add_put(*wire.JobSpec.build("q", "a.b:c", jid="k2").to_wire())
    out.add_put(*wire.JobSpec.build("q", "a.b:c", jid="k3").to_wire(), by="parent")
    calls = ops.puts_at_once(out)
    assert [jids for jids, _ in calls] == [["k1", "k3"], ["k2"]]
    first, second = (call.args for _, call in calls)
    assert json.loads(str(first[0]))["by"] == "parent" and first[1] == '{"u":1}'
    assert json.loads(str(second[0])).get("by") is None
    assert all(call.repeatable for _, call in calls)


@pytest.mark.parametrize("spec", ["not json", "[1]", '{"queue":"q"}', '{"jid":5}'])
def test_a_put_spec_without_its_jid_is_refused_when_added(spec: str) -> None:
    with pytest.raises(BadArgument):
        Outcomes().add_put(spec, "{}")


def test_take_and_merge_keep_progress_and_puts_in_order() -> None:
    out = Outcomes()
    out.add_progress("j1", "t1", 1, None, None)
    out.add_put(*SPEC.to_wire())
    taken = out.take()
    assert len(out) == 0 and len(taken) == 2
    out.add_progress("j1", "t1", 2, None, None)
    out.add_put(*wire.JobSpec.build("q", "a.b:c", jid="k2").to_wire())
    out.merge(taken)
    assert out.progress["j1"][2] == 2, "the newer progress wins"
    assert [row[0] for row in out.puts] == ["k1", "k2"], "the older puts go first"


def test_too_many_puts_with_one_completion_are_refused() -> None:
    with pytest.raises(BadArgument, match="at most 1000"):
        Outcomes().add_complete("j", "t", puts=[SPEC.to_wire()] * 1001)


def test_a_result_is_sent_as_json_text() -> None:
    assert wire.result_json(None) == ""
    assert wire.result_json({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    with pytest.raises(BadArgument, match="not JSON"):
        wire.result_json({1, 2})
