"""mypy checks a typed job's arguments: the project's pinned mypy (from this venv)
passes the snippet that uses typed jobs right, and reports each error of the one
that uses them wrong, once its `# type: ignore[code]` markers are taken off.

(With the markers on, the project's own mypy run, strict with warn_unused_ignores,
fails too if one of those lines stops being an error.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MARKER = re.compile(r"  # type: ignore\[([a-z, -]+)\]$")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<text>.*)  \[(?P<code>[a-z-]+)\]$")


def marked(path: Path) -> tuple[str, set[tuple[int, str]]]:
    """The file's text without its markers, and the (line, code) errors they mark."""
    lines, expected = [], set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        found = MARKER.search(line)
        if found:
            expected |= {(number, code.strip()) for code in found.group(1).split(",")}
        lines.append(line[: found.start()] if found else line)
    return "\n".join(lines) + "\n", expected


def mypy(*paths: Path, cache: Path) -> dict[str, set[tuple[int, str]]]:
    """{file name: {(line, code)}} of the errors the project's mypy reports."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--show-error-codes",
            *map(str, paths),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    errors: dict[str, set[tuple[int, str]]] = {}
    for line in done.stdout.splitlines():
        found = ERROR.match(line)
        if found:
            name = Path(found["path"]).name
            errors.setdefault(name, set()).add((int(found["line"]), found["code"]))
    return errors


def test_mypy_reports_wrong_argument_types_of_typed_jobs_and_passes_right_ones(
    tmp_path: Path,
) -> None:
    text, expected = marked(HERE / "wrong_arguments.py")
    unmarked = tmp_path / "wrong_arguments_unmarked.py"
    unmarked.write_text(text)
    assert (15, "arg-type") in expected  # send_email.put(to=42)
    assert len(expected) >= 10

    errors = mypy(
        HERE / "right_arguments.py", HERE / "wrong_arguments.py", unmarked, cache=tmp_path / "c"
    )

    assert errors.get("right_arguments.py", set()) == set()
    assert errors.get("wrong_arguments.py", set()) == set()  # every marker marks an error
    assert errors.get("wrong_arguments_unmarked.py", set()) == expected
