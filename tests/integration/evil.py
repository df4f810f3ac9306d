"""A module no test master allows: importing it leaves a mark."""

from pathlib import Path

Path("/tmp/runtime-evil-imported").write_text("imported")


def run(job: object) -> None:
    pass
