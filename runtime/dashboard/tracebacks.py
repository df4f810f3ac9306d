"""A failure's traceback cut into the parts a page shows: runs of runtime's own
frames (the child that called the job, the typed wrapper) apart from the rest, so
the page can fold them behind a toggle and show the job's own frames first.

A frame is the `  File "...", line N, in name` line and the indented lines under
it (its source line and the ^^^ markers). It is runtime's when its file is a
module of this package, wherever the package is installed (the traceback may
come from another host). Anything that is not a frame (the header, the exception,
"During handling of ...") is kept as it is. Pure text in, parts out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_FRAME = re.compile(r'^  File "(?P<path>.+)", line \d+')
_PACKAGE = Path(__file__).resolve().parent.parent  # runtime/


@dataclass(frozen=True)
class Part:
    text: str  # lines, without the last newline
    frames: int  # how many of runtime's frames it holds; 0: the job's own text

    @property
    def own(self) -> bool:
        """Whether the part is runtime's own frames (what the page folds)."""
        return self.frames > 0


@cache
def _modules() -> frozenset[str]:
    """The package's modules as a frame names them after ".../runtime/"."""
    return frozenset(p.relative_to(_PACKAGE).as_posix() for p in _PACKAGE.rglob("*.py"))


def is_own(path: str) -> bool:
    """Whether a frame's file is one of runtime's modules."""
    path = path.replace("\\", "/")
    return any(path.endswith("/runtime/" + module) for module in _modules())


def parts(message: str) -> list[Part]:
    """The message in order, runs of runtime's frames apart from everything else."""
    found: list[Part] = []
    lines: list[str] = []
    frames = 0  # runtime's frames in `lines`; 0 while they are the job's text
    in_frame = False  # the last line read belongs to a frame (its own or not)
    for line in message.splitlines():
        start = _FRAME.match(line)
        if start:
            own = is_own(start["path"])
        elif in_frame and line.startswith("    "):
            own = frames > 0  # a frame's source line goes with its frame
        else:
            own = False
        in_frame = bool(start) or (in_frame and line.startswith("    "))
        if own != (frames > 0) and lines:
            found.append(Part("\n".join(lines), frames))
            lines, frames = [], 0
        lines.append(line)
        frames += 1 if start and own else 0
    if lines:
        found.append(Part("\n".join(lines), frames))
    return found
