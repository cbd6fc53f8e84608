"""The docs name what exists: repository paths in the guides, methods citations and their anchors.

A guide that names a file that was moved or never written sends a reader nowhere; a citation of a
section of the methods page needs that section there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [
    "ARCHITECTURE.md",
    "CONTRIBUTING.md",
    "SECURITY.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
]
PACKAGES = ("swe_gym", "envs", "agents", "algos")
# Where code and docs may cite the methods page.
CITING_DIRS = (*PACKAGES, "tests", "benchmarks", "examples", "scripts", "docs")
CITING_SUFFIXES = (".py", ".md", ".yaml", ".yml")
METHODS = ROOT / "docs/methods.md"

_BACKTICKED = re.compile(r"`([^`\s]+)`")
_NOT_A_PATH = re.compile(r"[<>*{}$~:=()\[\]]|^-|\.\.")


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}


def repository_paths(text: str) -> list[str]:
    """Backticked tokens that name a path from the repository root (`algos/objectives/`,
    `swe_gym/sandbox/`, `README.md`): the first component is a top-level entry."""
    top = _top_level()
    out = []
    for token in _BACKTICKED.findall(text):
        token = token.split("#", 1)[0].rstrip(".,;")
        if _NOT_A_PATH.search(token):
            continue
        first = token.split("/", 1)[0]
        if "/" in token and first in top or token in top:
            out.append(token)
    return out


def architecture_table_paths(text: str) -> list[str]:
    """The module column of ARCHITECTURE.md's table, resolved against its package column: a
    name without a folder sits in the folder of the cell's previous name (`sandbox/local.py`,
    `local_transport.py`)."""
    out = []
    package = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3:
            continue
        pkg = _BACKTICKED.findall(cells[0])
        if pkg:
            package = pkg[0]
        if package not in PACKAGES:
            continue
        folder = ""
        for name in _BACKTICKED.findall(cells[1]):
            if "/" in name.rstrip("/"):
                folder = name.rsplit("/", 1)[0] + "/" if not name.endswith("/") else ""
            out.append(f"{package}/{name}" if "/" in name else f"{package}/{folder}{name}")
    return out


@pytest.mark.parametrize("guide", GUIDES)
def test_guides_name_paths_that_exist(guide):
    text = (ROOT / guide).read_text(encoding="utf-8")
    paths = repository_paths(text)
    if guide == "ARCHITECTURE.md":
        paths += architecture_table_paths(text)
        assert len(paths) > 50, "the table's modules were not found; did its layout change?"
    missing = sorted({p for p in paths if not (ROOT / p).exists()})
    assert not missing, f"{guide} names paths that do not exist: {missing}"


def _citing_files() -> list[Path]:
    files = [
        p
        for d in CITING_DIRS
        for p in (ROOT / d).rglob("*")
        if p.suffix in CITING_SUFFIXES and p.is_file()
    ]
    return files + sorted(ROOT.glob("*.md"))


def test_methods_are_cited_from_the_repository():
    wrong = []
    for path in _citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"([\w./-]*)methods\.md", text):
            if m.group(1) not in ("docs/", "") or (m.group(1) == "" and path != METHODS):
                line = text.count("\n", 0, m.start()) + 1
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)}")
    assert not wrong, f"cite docs/methods.md (in the repository), not another file: {wrong}"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors a Markdown renderer gives the headings (GitHub's rule: lower case, spaces to
    hyphens, punctuation other than hyphens and underscores dropped)."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            title = re.sub(r"[`*_]{1,2}(.+?)[`*_]{1,2}", r"\1", m.group(1)).lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_methods_citations_name_sections_that_exist():
    text = METHODS.read_text(encoding="utf-8")
    anchors = heading_anchors(text)
    assert {"grpo", "dapo", "rft", "kl-estimators", "gspo", "rloo"} <= anchors
    missing = [
        f"(#{a}) in docs/methods.md"
        for a in re.findall(r"\]\(#([\w-]+)\)", text)
        if a not in anchors
    ]
    cited = 0
    for path in _citing_files():
        body = path.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"docs/methods\.md#([\w-]+)", body):
            cited += 1
            if m.group(1) not in anchors:
                missing.append(f"{path.relative_to(ROOT)}: #{m.group(1)}")
    assert cited > 0
    assert not missing, f"citations of sections docs/methods.md does not have: {missing}"
