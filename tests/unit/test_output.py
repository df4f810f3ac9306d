"""A child's output as the master reads it: lines and log records attributed to the
jobs it was sent, in order, by their end markers; each attempt's tail kept; a
chatty job held to its budget."""

from __future__ import annotations

import json
import logging

import pytest

from runtime.children import protocol
from runtime.master.output import BUDGET_BYTES_S, LINE_MAX, LIVE_BYTES_S, TAIL_BYTES, Output


def end(jid: str) -> bytes:
    return protocol.MARK_END + f"{jid}\n".encode()


def sent(*jids: str) -> Output:
    """A child's output (worker "h") that was sent these jobs of klass m:f, in order."""
    out = Output(0, "h")
    for jid in jids:
        out.sent(jid, "m:f")
    return out


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_lines_are_logged_with_the_job_that_printed_them_and_its_tail_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    out = Output(0, "host-1")
    out.feed(b"before\n", 0.0)
    out.sent("j1", "m:f")
    out.sent("j2", "m:f")  # sent ahead: it runs when j1 is done
    out.feed(b"hello\nwor", 0.0)
    out.feed(b"ld\n" + end("j1") + b"next\n", 0.1)
    assert lines(caplog) == [
        "before child=0 worker=host-1",
        "hello jid=j1 klass=m:f worker=host-1",
        "world jid=j1 klass=m:f worker=host-1",
        "next jid=j2 klass=m:f worker=host-1",
    ]
    assert out.ended_tail("j1") == "hello\nworld\n", "a line read in two parts is kept once"
    assert out.tail_text() == "next\n", "each attempt's tail starts empty"
    out.feed(end("j2") + b"idle\n", 0.2)
    assert out.ended_tail("j2") == "next\n"
    assert lines(caplog)[-1] == "idle child=0 worker=host-1"


def test_a_job_the_child_skipped_ends_without_output(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    out = sent("j1", "j2", "j3")
    out.feed(b"one\n" + end("j1") + end("j2") + b"three\n", 0.0)
    assert lines(caplog) == ["one jid=j1 klass=m:f worker=h", "three jid=j3 klass=m:f worker=h"]
    assert out.ended_tail("j2") == ""


def test_a_line_left_unfinished_at_the_end_marker_belongs_to_its_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    out = sent("j1")
    out.feed(b"no newline" + end("j1")[:5], 0.0)
    out.feed(end("j1")[5:] + b"idle\n", 0.0)
    assert lines(caplog) == ["no newline jid=j1 klass=m:f worker=h", "idle child=0 worker=h"]


def test_log_records_keep_their_level_and_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    out = Output(0, "h")
    record = {"level": logging.WARNING, "name": "myapp.jobs", "message": "careful\nsecond line"}
    out.sent("j1", "m:f")
    out.feed(protocol.MARK_LOG + json.dumps(record).encode() + b"\n", 0.0)
    [logged] = caplog.records
    assert (logged.levelno, logged.name) == (logging.WARNING, "myapp.jobs")
    assert logged.getMessage() == "careful\nsecond line jid=j1 klass=m:f worker=h"
    assert out.tail_text() == "WARNING myapp.jobs: careful\nsecond line\n", "kept as read"


def test_a_chatty_job_is_counted_past_its_budget_and_summarised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    out = sent("j1")
    chunk = b"x" * 99 + b"\n"
    for _ in range(10 * BUDGET_BYTES_S // (64 * 1024)):  # 10 MiB in one instant
        out.feed(chunk * 655, 0.0)
    logged = len(caplog.records)
    assert logged <= BUDGET_BYTES_S // 100 + 1, "no more than the budget is logged"
    out.feed(b"", 1.0)
    summary = caplog.records[-1].getMessage()
    assert "lines (" in summary and "of output not logged" in summary
    assert len(out.tail) == TAIL_BYTES


def test_a_long_line_without_a_newline_is_logged_in_pieces(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    out = sent("j1")
    out.feed(b"y" * (LINE_MAX + 10), 0.0)
    assert len(caplog.records) == 1 and len(out.partial) == 0


def test_end_markers_read_on_their_own_end_their_jobs_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    out = sent("j1", "j2")
    out.feed(end("j1"), 0.0)  # a job that printed nothing: the most common read
    assert out.job == ("j2", "m:f")
    assert out.ended_tail("j1") == ""
    out.feed(b"half a line", 0.0)
    out.feed(end("j2"), 0.0)
    assert out.ended_tail("j2") == "half a line"
    assert lines(caplog) == ["half a line jid=j2 klass=m:f worker=h"]
    assert out.job is None


def test_end_markers_read_together_end_each_job_and_text_between_them_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    out = sent("j1", "j2", "j3", "j4")
    out.feed(end("j1") + end("j2"), 0.0)  # two silent jobs in one read
    assert out.job == ("j3", "m:f")
    assert (out.ended_tail("j1"), out.ended_tail("j2")) == ("", "")
    out.feed(end("j3") + b"printed by j4\n" + end("j4"), 0.0)
    assert out.ended_tail("j3") == ""
    assert out.ended_tail("j4") == "printed by j4\n"
    assert lines(caplog) == ["printed by j4 jid=j4 klass=m:f worker=h"]
    assert out.job is None


def test_the_running_jobs_whole_lines_go_live_until_it_ends() -> None:
    out = sent("j1", "j2")
    out.feed(b"one\ntw", 0.0)
    assert out.take_live(0.1) == ("j1", "one\n", 0), "a line not finished waits"
    out.feed(b"o\n" + protocol.MARK_LOG + b'{"level": 30, "name": "app", "message": "hm"}\n', 0.2)
    assert out.take_live(0.3) == ("j1", "two\nWARNING app: hm\n", 0)
    out.feed(b"last words\n" + end("j1"), 0.4)
    assert out.take_live(0.5) is None, "an ended job's lines go with its report"
    out.feed(b"second\n", 0.6)
    assert out.take_live(0.7) == ("j2", "second\n", 0)
    assert out.take_live(0.8) is None


def test_live_output_past_its_budget_is_counted_not_sent() -> None:
    out = sent("j1")
    line = b"x" * 1023 + b"\n"
    out.feed(line * (LIVE_BYTES_S // 1024 + 10), 0.0)
    jid, text, dropped = out.take_live(0.0) or ("", "", 0)
    assert (jid, len(text), dropped) == ("j1", LIVE_BYTES_S, 10)
    out.feed(line, 0.01)
    assert out.take_live(0.01) == ("j1", "", 1), "no budget back yet"
    out.feed(line, 2.0)
    assert out.take_live(2.0) == ("j1", "", 1), "the budget comes back at the take"
    out.feed(line, 2.1)
    assert out.take_live(2.1) == ("j1", line.decode(), 0)
