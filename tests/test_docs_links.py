"""README and the guides in docs/ (issue 24): one page of README, every link and picture pointing somewhere real.

Links are checked as GitHub renders them: relative to the file that holds them, with a ``#fragment`` that must
name a heading of the target (GitHub's anchor: lower case, punctuation dropped, spaces as hyphens).  Code
(fenced blocks and inline ``code``) holds no links.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
GUIDES = sorted(DOCS.glob("guide-*.md"))
#: [text](target) and ![alt](target), a title allowed after the target.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def without_code(text: str) -> str:
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def links(page: Path) -> list[str]:
    return LINK.findall(without_code(page.read_text(encoding="utf-8")))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^(```|~~~).*?^\1", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {anchor(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M)}


def test_readme_is_one_page_with_the_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move reference text into a guide in docs/"
    text = "\n".join(lines)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test"):
        assert f"make {target}" in text
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"the Makefile has no '{target}' target"
    assert "| goal | target | measured |" in text  # the performance table stays in README


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_picture_points_to_an_existing_file(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target} (no {path})")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target} (no heading '#{fragment}' in {path.name})")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_every_guide_is_reachable_and_has_a_heading():
    index = {target.partition("#")[0] for target in links(DOCS / "index.md")}
    readme = {target.partition("#")[0] for target in links(ROOT / "README.md")}
    assert "docs/index.md" in readme
    for guide in GUIDES:
        assert guide.name in index, f"docs/index.md does not link {guide.name}"
        assert guide.read_text(encoding="utf-8").startswith("# ")
    for reference in ("PROTOCOL.md", "ANALYSIS.md", "STALLS.md"):
        assert reference in index


def test_every_screenshot_is_shown_in_a_guide():
    shown = {(page.parent / t).resolve() for page in PAGES for t in links(page) if not re.match(r"^[a-z]+:", t)}
    pictures = sorted(DOCS.glob("*.png"))
    assert pictures
    assert [p.name for p in pictures if p.resolve() not in shown] == []


def test_the_checks_find_a_broken_link_and_a_missing_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Next steps\n\n[ok](#next-steps) ![pic](missing.png) `[code](not-a-link.md)`\n"
                    "```\n[fenced](nor-this.md)\n```\n", encoding="utf-8")
    assert links(page) == ["#next-steps", "missing.png"]
    assert anchors(page) == {"a-page", "next-steps"}
    assert anchor("On a GPU: `make gpu-check`") == "on-a-gpu-make-gpu-check"
