"""Every relative link in README.md and docs/*.md resolves, and the README stays a front door.

A link's file must exist (relative to the page that links it), and a `#anchor` must be the GitHub slug
of a heading in the target Markdown file (or in the page itself for a bare `#anchor`). Links inside code
blocks and code spans are not links; web addresses are not checked (no network in tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, code spans blanked."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lowercased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading renders as its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (repeated slugs numbered -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced or not (match := HEADING.match(line)):
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [target for line in _prose_lines(page.read_text()) for target in LINK.findall(line)]


def test_the_slug_is_githubs() -> None:
    assert slug("numpy and pandas: the `science` profile") == "numpy-and-pandas-the-science-profile"
    assert slug("Files, artifacts and sessions") == "files-artifacts-and-sessions"
    assert slug("`__main__`") == "__main__"
    assert slug("Python in the sandbox: the standard library, `__main__`") == (
        "python-in-the-sandbox-the-standard-library-__main__"
    )


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nope) [gone](missing.md) `[code](x.md)`\n")
    assert links(page) == ["#title", "#nope", "missing.md"]
    assert anchors(page) == {"title"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked offline
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, broken


def test_the_readme_is_at_most_300_lines() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material to docs/"


def _unreleased() -> list[str]:
    text = (ROOT / "CHANGELOG.md").read_text()
    return text.split("\n## [Unreleased]\n", 1)[1].split("\n## [", 1)[0].splitlines()


def test_the_changelog_says_each_change_in_one_line_of_user_facing_words() -> None:
    lines = _unreleased()
    headings = [line for line in lines if line.startswith("### ")]
    assert len(headings) == len(set(headings)), headings
    assert set(headings) <= {
        f"### {kind}" for kind in ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
    }
    continued = [line for line in lines if line.strip() and not line.startswith(("- ", "### "))]
    assert not continued, f"an entry continues on a second line: {continued[:3]}"
    internal = [
        line for line in lines if re.search(r"wasmexec\._|(?<![\w/])_[a-z]\w*(\.py)?\b|SessionStore|ServeOptions", line)
    ]
    assert not internal, f"internal module names: {internal[:3]}"
