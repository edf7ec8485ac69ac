"""The documentation: README.md and docs/*.md.

Every relative link resolves to a file of the repository (and its ``#anchor`` to a
heading of that file, slugged as GitHub does), the README stays a short first read, and
specs are named by what they are, never by a file number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 12_000

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def _prose(text: str) -> str:
    """The text outside fenced code blocks (links and headings inside them are not)."""
    return _FENCE.sub("", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation other
    than ``-`` and ``_`` removed, each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; repeated slugs get -1, -2, … as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for match in _HEADING.finditer(_prose(path.read_text("utf-8"))):
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def test_slugs_follow_github() -> None:
    assert github_slug("pw-decide-row/1: schema descriptions read as contracts") == (
        "pw-decide-row1-schema-descriptions-read-as-contracts"
    )
    assert (
        github_slug("`rowgate dedupe` on existing Parquet") == "rowgate-dedupe-on-existing-parquet"
    )
    assert github_slug("Rubrics, scoring and decisions") == "rubrics-scoring-and-decisions"
    assert github_slug("The AutoQA evaluation contract (0.1.0)") == (
        "the-autoqa-evaluation-contract-010"
    )


def test_there_are_pages() -> None:
    assert (ROOT / "docs" / "index.md") in PAGES
    assert len(PAGES) > 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page.read_text("utf-8"))):
        if _EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_every_docs_page_is_listed_in_the_index() -> None:
    index = _prose((ROOT / "docs" / "index.md").read_text("utf-8"))
    linked = {t.partition("#")[0] for t in _LINK.findall(index)}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages <= linked, f"not in docs/index.md: {sorted(pages - linked)}"


def test_readme_is_short() -> None:
    size = len((ROOT / "README.md").read_text("utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters (limit {README_LIMIT})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_specs_are_named_not_numbered(page: Path) -> None:
    """A reader cannot resolve "seed 002"; the spec's name says what it is."""
    found = re.findall(r"seed[ _-]?00\d", page.read_text("utf-8"), re.I)
    assert not found, f"{page.name} names a spec by number: {found}"


def test_every_test_the_reliability_page_names_exists() -> None:
    """Each guarantee names the test that proves it: a renamed or deleted test fails here.
    ``::name`` alone refers to the last file named before it."""
    import ast

    text = (ROOT / "docs" / "reliability.md").read_text("utf-8")
    named: list[tuple[str, str]] = []
    current = ""
    for match in re.finditer(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", text):
        current = match.group(1) or current
        test = match.group(2) or match.group(3)
        if test:
            named.append((current, test))
    assert len(named) > 50
    missing = []
    for file, test in named:
        tree = ast.parse((ROOT / file).read_text("utf-8"))
        if test not in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}:
            missing.append(f"{file}::{test}")
    assert missing == []
