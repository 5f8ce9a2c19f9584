"""The documentation points inside the repository, and its links land.

Every file a clone holds must stand alone: nothing points to notes kept beside the checkout (a
design file, a pins file, research notes: what the project needs of them is in docs/, with the
sources named). Every link of README.md and docs/ to a file of the repository finds the file, and an
anchor (`PERFORMANCE.md#...`) finds a heading (as GitHub makes its id) or an explicit `<a id>`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = (".py", ".md", ".sh", ".toml", ".txt", ".yaml", ".yml", ".js", ".html", ".proto", ".cfg", ".Dockerfile")
# Names of the notes outside the checkout, as the code and the docs cited them.
OUTSIDE = re.compile(r"\b(?:DESIGN|PINS)\.md\b|\.\./shared/|\bshared/research\b|(?<![\w/.-])research/[\w.-]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in listed.splitlines() if name.endswith(TEXT) and (REPO / name).is_file()]


def _outside(path: Path) -> list[str]:
    """The references in `path` to files outside the repository (from docs/, `research/x.md` is
    docs/research/x.md when that file exists)."""
    hits = [m.group(0) for m in OUTSIDE.finditer(path.read_text(errors="replace"))]
    inside = path.parent == REPO / "docs"
    return [h for h in hits if not (inside and h.startswith("research/") and (REPO / "docs" / h).is_file())]


def _slug(heading: str) -> str:
    """GitHub's id of a heading: lower case, punctuation but hyphens and underscores dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fenced:
            slug = _slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        found.update(re.findall(r'<a id="([^"]+)"', line))
    return found


def _broken_links(pages: list[Path], root: Path = REPO) -> list[str]:
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            name, _, anchor = target.partition("#")
            destination = (page.parent / name).resolve() if name else page
            if not destination.exists():
                broken.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
                broken.append(f"{page.relative_to(root)}: {target} (no such anchor)")
    return broken


def test_nothing_points_outside_the_repository() -> None:
    checked = [p for p in _tracked() if p != Path(__file__).resolve()]  # this file names what it looks for
    found = {str(p.relative_to(REPO)): hits for p in checked if (hits := _outside(p))}
    assert found == {}


def test_the_check_sees_a_reference_outside(tmp_path: Path) -> None:
    """The check above must be able to fail."""
    note = tmp_path / "note.py"
    note.write_text('"""The store (DESIGN.md section 4), pins from PINS.md, research/serving.md 3.3."""\n')
    assert _outside(note) == ["DESIGN.md", "PINS.md", "research/serving.md"]


def test_every_link_of_the_docs_lands() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    assert _broken_links(pages) == []


def test_the_check_sees_a_broken_anchor(tmp_path: Path) -> None:
    """The check above must be able to fail: a missing anchor, a missing file; a heading's id and an
    explicit anchor are found."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "A.md").write_text('# A page\n\n## Speed, round 2 (issue 19)\n\n<a id="kept-anchor"></a>\n')
    page = docs / "B.md"
    page.write_text(
        "[ok](A.md#speed-round-2-issue-19) [ok](A.md#kept-anchor) [bad](A.md#gone) [bad](C.md) [ok](https://x.org/#y)\n"
    )
    assert _broken_links([page], tmp_path) == [
        "docs/B.md: A.md#gone (no such anchor)",
        "docs/B.md: C.md (no such file)",
    ]
