"""The documentation: the docs/ site builds with MkDocs in strict mode (a broken
link or anchor fails it), every relative link of the README front page reaches a
file and a heading, and the sections the README shares with a docs page say the
same thing on both."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
CONFIG = REPO / "mkdocs.yml"

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` (never with --quiet: it hides the warnings strict counts)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=config.parent,
    )


def slug(heading: str) -> str:
    """The anchor MkDocs (and a code host) gives a heading: lower case, words
    joined by hyphens, punctuation dropped."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def section(page: Path, heading: str) -> str:
    """The text under `heading` in `page`, up to the next heading of its level or
    above, with links made relative to docs/ (as a docs page writes them)."""
    text = page.read_text()
    level = len(heading.split(" ", 1)[0])
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    heads = re.finditer(rf"^#{{1,{level}}} ", text[start:], re.M)
    ends = (start + m.start() for m in heads)
    stop = next((end for end in ends if not in_fence(text, end)), len(text))
    return text[start:stop].replace("](docs/", "](").strip()


def in_fence(text: str, at: int) -> bool:
    """Whether `at` lies inside a fenced code block (where `#` starts a comment)."""
    return text[:at].count("\n```") % 2 == 1


def test_the_docs_build_in_strict_mode(tmp_path: Path) -> None:
    done = build(CONFIG, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    built = {p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")}
    pages = {p.stem for p in DOCS.glob("*.md")} - {"index"}
    assert pages <= built, "every page is in the site"


def test_a_broken_link_fails_the_docs_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(CONFIG, tmp_path / "mkdocs.yml")
    faults = tmp_path / "docs" / "faults.md"
    faults.write_text(faults.read_text() + "\nSee [the semantics](semantics.md#no-such-heading).\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-heading" in done.stdout + done.stderr


def test_every_relative_link_in_the_readme_reaches_a_file_and_a_heading() -> None:
    links = LINK.findall(FENCE.sub("", README.read_text()))
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert any(link.startswith("docs/") for link in relative)
    for link in relative:
        path, _, anchor = link.partition("#")
        target = REPO / path if path else README
        assert target.is_file(), f"README links to {link}: no such file"
        if anchor and target.suffix == ".md":
            assert anchor in anchors(target), f"README links to {link}: no such heading"


def test_the_readme_links_every_docs_page() -> None:
    linked = {link.partition("#")[0] for link in LINK.findall(README.read_text())}
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")} - {"docs/index.md"}
    assert pages <= linked


def test_what_the_readme_shares_with_the_docs_reads_the_same() -> None:
    assert section(README, "## Quick start") == section(DOCS / "index.md", "## Quick start")
    assert section(README, "## Install") == section(DOCS / "writing-jobs.md", "## Install")
    assert section(README, "## Layout") == section(DOCS / "index.md", "## Layout")
    pages = section(README, "## Documentation").split("\n\n", 1)[1]
    assert pages == section(DOCS / "index.md", "## The pages")


def test_the_readme_says_why_children_are_not_forked_with_multiprocess() -> None:
    for page in (README, DOCS / "design.md"):
        text = " ".join(page.read_text().split())
        assert "`multiprocess` package" in text or "**multiprocess**" in text, page
        assert "pickle" in text, page
        assert "length-prefixed JSON" in text, page
