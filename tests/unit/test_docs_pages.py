"""What a reader of a clone can follow: code cites docs/ pages that exist (never
the specification or style notes that are not in the repository), and every
docs page is cut into sections a link can name."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CITING = ("runtime", "tests", "bench", "systemd")  # where code and its comments live
SUFFIXES = {".py", ".lua", ".sh", ".service", ".toml", ".md", ".html", ".js", ".css", ""}
# spelled in pieces, so this file does not cite them itself
OUTSIDE = re.compile(r"\b(?:" + "SP" + "EC|" + "ST" + r"YLE)(?:\.md\b|\s+§?\d)")


def files() -> list[Path]:
    found = [REPO / "dev", REPO / "README.md", *DOCS.glob("*.md")]
    for top in CITING:
        found += [p for p in (REPO / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    # only the project's own files: not caches, nor what a run leaves (bench/.work's venvs)
    return [
        p
        for p in found
        if p.is_file()
        and not any(
            part == "__pycache__" or part.startswith(".") for part in p.parts[len(REPO.parts) :]
        )
    ]


def test_nothing_cites_the_specification_or_style_notes_outside_the_repository() -> None:
    cited = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert cited == [], "cite the docs/ page that holds the fact instead"


def test_the_pattern_finds_what_it_is_for() -> None:
    for cited in ("see " + "SP" + "EC.md", "(" + "SP" + "EC 2b)", "ST" + "YLE.md, x"):
        assert OUTSIDE.search(cited), cited
    for fine in ("JobSpec.build", "SPEC = wire.JobSpec", "SPEC % 3", "docs/design.md"):
        assert not OUTSIDE.search(fine), fine


def test_every_docs_page_the_code_cites_exists() -> None:
    pages = {p.name for p in DOCS.glob("*.md")}
    missing = [
        f"{path.relative_to(REPO)}: docs/{name}"
        for path in files()
        for name in re.findall(r"docs/([\w-]+\.md)", path.read_text(errors="replace"))
        if name not in pages
    ]
    assert missing == []


# pages not cut yet, each with why; remove a page once it has its sections
NOT_CUT_YET: dict[str, str] = {}  # page -> why it has no sections yet


def test_every_docs_page_has_sections_to_link() -> None:
    """A page longer than a screen is cut by ## headings (an anchor each)."""
    unlinkable = [
        page.name
        for page in DOCS.glob("*.md")
        if len(page.read_text().splitlines()) > 40
        and not re.search(r"^## \S", page.read_text(), re.M)
    ]
    assert sorted(unlinkable) == sorted(NOT_CUT_YET)


def test_the_acl_example_in_redis_md_is_the_rules_runtime_writes() -> None:
    """docs/redis.md shows the rules of `runtime/queue/acl.py` for `runtime`, exactly."""
    from runtime.queue import acl  # noqa: PLC0415

    wanted = "ACL SETUSER app on >secret " + " ".join(acl.rules("runtime"))
    assert wanted in (DOCS / "redis.md").read_text().splitlines()
