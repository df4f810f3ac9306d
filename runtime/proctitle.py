"""Process titles (setproctitle): what each runtime process is doing, for ps and top."""

from __future__ import annotations

from setproctitle import setproctitle


def set_title(title: str) -> None:
    setproctitle(title)
