"""A child empties its workdir after every job, scanning it only when its
status-change time says something may have changed since it was last empty."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.sandbox import sandbox


def _fill(workdir: Path) -> None:
    (workdir / "left.txt").write_text("left behind")
    (workdir / "cache").mkdir()
    (workdir / "cache" / "blob").write_bytes(b"x")


def test_a_workdir_just_emptied_is_not_trusted_and_is_scanned_again(tmp_path: Path) -> None:
    workdir = tmp_path / "0"
    workdir.mkdir()
    _fill(workdir)
    assert sandbox.empty_if_changed(workdir, None) is None  # its stamp is this tick's
    assert list(workdir.iterdir()) == []
    _fill(workdir)
    assert sandbox.empty_if_changed(workdir, None) is None
    assert list(workdir.iterdir()) == []


def test_a_workdir_whose_stamp_moved_is_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "STAMP_TRUSTED_AFTER_NS", -1)  # every stamp is old enough
    workdir = tmp_path / "0"
    workdir.mkdir()
    _fill(workdir)
    seen = os.stat(workdir).st_ctime_ns - 1  # what it was before the job changed it
    stamp = sandbox.empty_if_changed(workdir, seen)
    assert list(workdir.iterdir()) == []
    assert stamp == os.stat(workdir).st_ctime_ns


def test_a_workdir_unchanged_since_a_trusted_stamp_costs_one_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "0"
    workdir.mkdir()
    stamp = os.stat(workdir).st_ctime_ns

    def scanned(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unchanged workdir is not scanned")

    monkeypatch.setattr(sandbox, "empty", scanned)
    assert sandbox.empty_if_changed(workdir, stamp) == stamp


def test_a_missing_workdir_is_made_again(tmp_path: Path) -> None:
    workdir = tmp_path / "0"
    assert sandbox.empty_if_changed(workdir, 12345) is None
    assert workdir.is_dir()
