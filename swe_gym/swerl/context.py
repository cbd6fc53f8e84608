"""Code context for SWE-RL prompts: files at a commit from a local clone, and relevant-file
selectors (docs/methods.md#swe-rl: relevant but unmodified files are added to the context).

A selector is any callable ``(issue_text, candidates: {path: content}, k) -> [path, ...]``
(best first). ``BM25Selector`` is the built-in one: BM25 over identifiers, stdlib only.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from swe_gym.errors import unknown_choice

GIT_TIMEOUT = 120.0
# Files a selector may propose: text source/config/doc files of a sane size.
SOURCE_SUFFIXES = frozenset(
    ".py .pyi .pyx .c .h .cc .cpp .hpp .rs .go .java .kt .scala .js .jsx .ts .tsx .rb .php .cs "
    ".swift .m .sh .toml .cfg .ini .yaml .yml .json .md .rst .txt".split()
)
MAX_CANDIDATE_BYTES = 200_000

Selector = Callable[[str, Mapping[str, str], int], list[str]]


def _git(repo: Path | str, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input,
        capture_output=True,
        timeout=GIT_TIMEOUT,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args[:3])} in {repo} failed: {proc.stderr.decode(errors='replace')[:300]}"
        )
    return proc.stdout


def list_files(repo: Path | str, commit: str) -> list[str]:
    """Every blob path in ``commit`` (``git ls-tree -r``)."""
    out = _git(repo, "ls-tree", "-r", "-z", "--name-only", commit)
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def read_files(repo: Path | str, commit: str, paths: Iterable[str]) -> dict[str, bytes | None]:
    """Raw bytes of ``paths`` at ``commit`` in one ``git cat-file --batch`` call; None if missing."""
    paths = list(paths)
    if not paths:
        return {}
    query = "".join(f"{commit}:{p}\n" for p in paths).encode("utf-8", "surrogateescape")
    out = _git(repo, "cat-file", "--batch", input=query)
    result: dict[str, bytes | None] = {}
    pos = 0
    for p in paths:
        eol = out.index(b"\n", pos)
        header = out[pos:eol].split()
        pos = eol + 1
        if header[-1:] == [b"missing"] or len(header) != 3 or header[1] != b"blob":
            result[p] = None
            continue
        size = int(header[2])
        result[p] = out[pos : pos + size]
        pos += size + 1  # the blob is followed by a newline
    return result


def decode_text(data: bytes | None) -> str | None:
    """UTF-8 text, or None for binary (a NUL byte) or non-UTF-8 content."""
    if data is None or b"\0" in data[:8000]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# ------------------------------------------------------------------------------ selectors

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{1,}")
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOP = frozenset(
    "the a an and or of to in is it be for on with as this that not if else def return import "
    "from self none true false class at by we i you are was were when what how can should".split()
)


def identifiers(text: str) -> list[str]:
    """Identifiers and their snake/camel parts, lower-cased, stop words dropped."""
    out: list[str] = []
    for tok in _IDENT_RE.findall(text):
        low = tok.lower()
        if low not in _STOP:
            out.append(low)
        parts = [p.lower() for piece in tok.split("_") for p in _CAMEL_RE.findall(piece)]
        if len(parts) > 1:
            out.extend(p for p in parts if len(p) > 2 and p not in _STOP)
    return out


@dataclass
class BM25Selector:
    """Rank candidate files by BM25 of the issue's identifiers against each file's path and
    identifiers (Robertson-Sparck Jones idf with +1 so scores stay positive)."""

    k1: float = 1.5
    b: float = 0.75
    path_weight: int = 3  # path tokens count this many times: a file named after the topic wins

    def __call__(self, issue: str, candidates: Mapping[str, str], k: int) -> list[str]:
        query = set(identifiers(issue))
        if not query or not candidates or k <= 0:
            return []
        docs: dict[str, Counter[str]] = {}
        for path, text in candidates.items():
            c = Counter(identifiers(text))
            for tok in identifiers(path.replace("/", " ").replace(".", " ")):
                c[tok] += self.path_weight
            docs[path] = c
        n = len(docs)
        avg = sum(sum(c.values()) for c in docs.values()) / n or 1.0
        df = Counter(t for c in docs.values() for t in query if t in c)
        scores: list[tuple[float, str]] = []
        for path, c in docs.items():
            length = sum(c.values())
            s = 0.0
            for t in query:
                tf = c.get(t, 0)
                if tf:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    s += (
                        idf
                        * tf
                        * (self.k1 + 1)
                        / (tf + self.k1 * (1 - self.b + self.b * length / avg))
                    )
            if s > 0:
                scores.append((s, path))
        scores.sort(key=lambda x: (-x[0], x[1]))
        return [p for _, p in scores[:k]]


def no_selector(issue: str, candidates: Mapping[str, str], k: int) -> list[str]:
    """Select nothing: the context is only the files the gold patch modifies."""
    return []


SELECTORS: dict[str, Callable[[], Selector]] = {"bm25": BM25Selector, "none": lambda: no_selector}


def resolve_selector(selector: str | Selector | None) -> Selector:
    """A selector from a name (``bm25``, ``none``), a callable, or None (= ``bm25``)."""
    if selector is None:
        return BM25Selector()
    if isinstance(selector, str):
        if selector not in SELECTORS:
            raise unknown_choice("context selector", selector, SELECTORS)
        return SELECTORS[selector]()
    if not callable(selector):
        raise TypeError(
            f"context_selector must be a name or a callable, got {type(selector).__name__}"
        )
    return selector


@dataclass
class CodeContext:
    files: dict[str, str]  # path -> content, sorted by path (order must not reveal gold files)
    modified: list[str]  # paths the gold patch modifies that exist at the commit
    relevant: list[str]  # selector picks (not modified)
    skipped: dict[str, str]  # path -> why it was left out (binary, non-UTF-8, missing)


def build_code_context(
    repo: Path | str,
    commit: str,
    issue: str,
    modified: Iterable[str],
    selector: Selector | None = None,
    max_relevant: int = 3,
    candidate_filter: Callable[[str], bool] | None = None,
) -> CodeContext:
    """Files the gold patch modifies plus up to ``max_relevant`` files the selector ranks
    highest among the other text files at ``commit``."""
    selector = selector or BM25Selector()
    modified = list(dict.fromkeys(modified))
    skipped: dict[str, str] = {}
    files: dict[str, str] = {}
    for path, data in read_files(repo, commit, modified).items():
        text = decode_text(data)
        if text is None:
            skipped[path] = (
                "missing at commit (created by the patch)"
                if data is None
                else "binary or not UTF-8"
            )
        else:
            files[path] = text
    relevant: list[str] = []
    if max_relevant > 0:
        keep = candidate_filter or (lambda p: Path(p).suffix.lower() in SOURCE_SUFFIXES)
        others = [
            p for p in list_files(repo, commit) if p not in files and p not in skipped and keep(p)
        ]
        cands: dict[str, str] = {}
        for path, data in read_files(repo, commit, others).items():
            if data is not None and len(data) <= MAX_CANDIDATE_BYTES:
                text = decode_text(data)
                if text is not None:
                    cands[path] = text
        relevant = selector(issue, cands, max_relevant)[:max_relevant]
        for p in relevant:
            files[p] = cands[p]
    return CodeContext(
        dict(sorted(files.items())), [p for p in modified if p in files], relevant, skipped
    )
