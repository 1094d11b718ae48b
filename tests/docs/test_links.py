"""The user documentation holds together: every relative link in README.md and
docs/**/*.md points at a file or folder of the repository, README.md stays short
with its Install section near the top, and no page cites notes kept outside the
repository. Plain Python: no TensorFlow."""
import bisect
import pathlib
import re

import pytest
from tests.stacks import TREE_ONLY

pytestmark = TREE_ONLY

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 300
INSTALL_WITHIN_LINES = 80

# [text](target) and ![alt](target); the target ends at whitespace or the closing
# parenthesis (an optional "title" after whitespace is ignored).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_files():
    return [README] + sorted((ROOT / "docs").rglob("*.md"))


def prose_lines(path):
    """(line number, line) of the file's lines outside fenced code blocks, with
    inline code removed."""
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, INLINE_CODE.sub("", line)


def relative_links(path):
    """(line number, target) of every link that names a path: not a web address,
    not mailto:, not a bare #anchor. A link's text may wrap onto the next lines."""
    numbered = list(prose_lines(path))
    text = "\n".join(line for _, line in numbered)
    starts = [0]
    for _, line in numbered:
        starts.append(starts[-1] + len(line) + 1)
    for match in LINK.finditer(text):
        target = match.group(1)
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        yield numbered[bisect.bisect_right(starts, match.start()) - 1][0], target


def broken_links(path, root=ROOT):
    """'file:line: target' of every relative link whose target (less its #fragment)
    does not exist relative to the linking file."""
    broken = []
    for number, target in relative_links(path):
        if not (path.parent / target.split("#", 1)[0]).exists():
            broken.append(f"{path.relative_to(root)}:{number}: {target}")
    return broken


def test_the_docs_exist():
    assert (ROOT / "docs" / "README.md").is_file()


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    broken = broken_links(path)
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_cites_notes_outside_the_repository(path):
    text = path.read_text(encoding="utf-8")
    assert "seed-notes" not in text.lower(), f"{path.relative_to(ROOT)} mentions seed-notes"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES} wanted"


def test_readme_has_install_near_the_top():
    headings = [line for number, line in prose_lines(README)
                if number <= INSTALL_WITHIN_LINES and re.match(r"#{1,6}\s", line) and "install" in line.lower()]
    assert headings, f"no heading containing 'Install' in README.md's first {INSTALL_WITHIN_LINES} lines"


def test_the_link_finder_finds_links(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("see [a](there.md#part), [b](missing.md), ![c](img.png), [d](https://x.org), [e](#top)\n"
                    "`[f](in-code.md)`\n```\n[g](fenced.md)\n```\na [wrapped\nlink](gone.md) [h](mailto:x@y.org)\n")
    assert list(relative_links(page)) == [(1, "there.md#part"), (1, "missing.md"), (1, "img.png"), (6, "gone.md")]
    assert broken_links(page, tmp_path) == ["page.md:1: missing.md", "page.md:1: img.png", "page.md:6: gone.md"]
