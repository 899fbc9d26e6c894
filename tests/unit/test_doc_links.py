"""Every relative link of README.md and docs/*.md points to a file that exists, and a link to a
heading (`file.md#heading`, `#heading`) to a heading that file has, named as GitHub names it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """text without its fenced blocks and code spans, where brackets are not links."""
    return CODE.sub("", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # https:, mailto: ...


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            broken.append(f"{target}: absolute; make it relative to {page.relative_to(ROOT)}")
            continue
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.relative_to(ROOT)} has no heading with that anchor")
    assert not broken, broken


def test_the_readme_stays_short_and_every_guide_is_linked_from_it() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) < 250
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(readme)}
    unlinked = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not unlinked, f"README.md links to no {unlinked}"


def test_the_anchors_are_githubs() -> None:
    page = ROOT / "docs" / "monitoring.md"
    assert {"sync---watch-the-endpoints", "which-nodes-lack-an-image"} <= anchors(page)
    assert "cri-proxy-pins-that-work-on-any-runtime-pinctl-cri-proxy" in anchors(ROOT / "docs" / "cri-proxy.md")
