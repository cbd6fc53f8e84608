"""A static look at a model patch for the known ways to forge a test verdict.

The patched code runs inside the test process, so it can reach the runner. The verdict channel
(``swe_gym.grading.verdict``) catches forged logs, early exits and rewritten reports; this check flags
the patch that tries, by what its *added lines* in non-test files say. A finding makes the
grading report ``suspect``; what a suspect patch earns is the env's ``suspect_policy``
(default: nothing). Families:

- ``pytest``: the test runner named (``pytest``, ``_pytest``, ``pluggy``, ``xfail``, ``skip``
  markers, report objects) in a file whose base version does not import pytest already (a
  pytest plugin or pytest's own repository edits such files honestly);
- ``exit``: ``os._exit`` or a kill of the own process (leave before the failures print);
- ``atexit``: code registered to run at interpreter exit (print results after the runner);
- ``modules``: writes to ``sys.modules`` or ``builtins`` (replace what the runner imports);
- ``introspection``: ``gc.get_objects``/``gc.get_referrers``, frame walking (``sys._getframe``,
  ``f_back``, ``f_globals``, ``inspect.stack``), closure cells: find the runner's or the
  grader's objects without naming them;
- ``grader``: this toolkit's names (``swe_gym``, its variables) or a process's environment
  read from ``/proc``.

The lines scanned are read from the working tree after the patch is applied (never only the
diff's text, which ``.gitattributes`` can turn into "binary"), NFKC-normalised as Python reads
identifiers (a fullwidth ``ｓｙｓ`` is ``sys``). ``native_files`` finds native code or bytecode
the patch put in the tree (by suffix or by an ELF, Mach-O or PE header): grading refuses it.

This is the second line. The first is the runtime guard (``guard.py``): names built at run time
from pieces, or read from data files, pass this scan and meet the guard. See SECURITY.md.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from swe_gym.grading.testinfra import protected_by_name

FAMILIES: dict[str, re.Pattern[str]] = {
    "pytest": re.compile(
        r"\b(?:_?pytest|pluggy|xfail|TestReport|CallInfo|hookimpl|runtest_\w+|"
        r"PYTEST_\w+)\b"
    ),
    "exit": re.compile(r"(?:\.|\bimport\s+)\s*_exit\b|\bkill\s*\([^)]*getpid"),
    "atexit": re.compile(r"\batexit\b"),
    "modules": re.compile(
        r"\bsys\s*\.\s*modules\s*(?:\[[^\]]*\]\s*=(?!=)|\.\s*(?:pop|update|setdefault|clear)\b)"
        r"|\bdel\s+sys\s*\.\s*modules\b|\b__builtins__\b|\bbuiltins\s*\.\s*\w+\s*=(?!=)"
        r"|setattr\s*\(\s*builtins\b"
    ),
    "introspection": re.compile(
        r"\bgc\s*\.\s*get_(?:objects|referrers|referents)\b|\bsys\s*\.\s*_getframe\b"
        r"|\.f_back\b|\.f_globals\b|\binspect\s*\.\s*(?:stack|currentframe|getouterframes)\b"
        r"|\b__closure__\b|\bcell_contents\b"
    ),
    "grader": re.compile(r"swe_gym|SWE_GYM|/proc/(?:self|\d+|\{)[^\"']*environ", re.IGNORECASE),
}
_IMPORTS_PYTEST = re.compile(r"^\s*(?:import|from)\s+_?pytest\b", re.MULTILINE)


@dataclass(frozen=True)
class Finding:
    path: str
    line: str
    family: str

    def __str__(self) -> str:
        return f"{self.family}: {self.path}: {self.line.strip()[:160]}"


def added_lines(patch: str) -> dict[str, list[str]]:
    """path -> the lines the patch adds to it (b-side paths; ``/dev/null`` sides skipped)."""
    from swe_gym.grading.patches import unquote

    out: dict[str, list[str]] = {}
    path = None
    for line in patch.split("\n"):
        if line.startswith("+++ "):
            target = unquote(
                line[4:].split("\t", 1)[0] if not line[4:].startswith('"') else line[4:]
            )
            path = None if target == "/dev/null" else target.removeprefix("b/")
            if path is not None:
                out.setdefault(path, [])
        elif line.startswith("diff --git "):
            path = None
        elif path is not None and line.startswith("+"):
            out[path].append(line[1:])
    return out


NATIVE_SUFFIXES = (".so", ".pyd", ".dylib", ".pyc", ".pyo", ".dll")
_MAGICS = (
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
)


def native_kind(path: str, head: bytes) -> str | None:
    """Why ``path`` (its first bytes ``head``) is native code or bytecode, else None."""
    low = path.lower()
    if low.endswith(NATIVE_SUFFIXES) or ".so." in low.rsplit("/", 1)[-1]:
        return "a native or bytecode file name"
    if head.startswith(b"\x7fELF"):
        return "an ELF header"
    if head.startswith(_MAGICS):
        return "a Mach-O header"
    if head.startswith(b"MZ") and len(head) >= 64:
        at = int.from_bytes(head[60:64], "little")
        if head[at : at + 4] == b"PE\0\0":
            return "a PE header"
    return None


def normalise(text: str) -> str:
    """As Python reads identifiers (NFKC): ``ｓｙｓ.ｍｏｄｕｌｅｓ`` reads ``sys.modules``."""
    return unicodedata.normalize("NFKC", text)


def tree_added_lines(
    current: dict[str, str], base_text: dict[str, str | None]
) -> dict[str, list[str]]:
    """path -> the lines of the file as it is in the tree that its base text does not hold."""
    out = {}
    for path, text in current.items():
        before = set(normalise(base_text.get(path) or "").splitlines())
        out[path] = [x for x in normalise(text).splitlines() if x not in before]
    return out


def scan(
    patch: str,
    test_files: list[str],
    base_text: dict[str, str | None] | None = None,
    current: dict[str, str] | None = None,
) -> list[Finding]:
    """Findings in the non-test files ``patch`` adds lines to. ``base_text``: path -> the
    file's text at the base commit (None: new), used to exempt pytest-aware files from the
    ``pytest`` family. ``current``: path -> the file's text in the tree after the patch; its
    new lines are scanned too (what runs, whatever the diff's text shows)."""
    base_text = base_text or {}
    found = []
    lines_of = {p: [normalise(x) for x in v] for p, v in added_lines(patch).items()}
    for path, extra in tree_added_lines(current or {}, base_text).items():
        have = set(lines_of.get(path, []))
        lines_of.setdefault(path, []).extend(x for x in extra if x not in have)
    for path, lines in lines_of.items():
        if not path.endswith((".py", ".pyi")) or protected_by_name(path, test_files, True):
            continue  # test infrastructure is reverted before the tests run
        pytest_aware = bool(_IMPORTS_PYTEST.search(base_text.get(path) or ""))
        for line in lines:
            code = line.split("#", 1)[0]
            for family, pattern in FAMILIES.items():
                if family == "pytest" and pytest_aware:
                    continue
                if pattern.search(code):
                    found.append(Finding(path, line, family))
    return found
