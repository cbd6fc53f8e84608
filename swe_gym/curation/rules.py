"""Curation rules: linked issues, bot PRs, test-file paths, licences (docs/methods.md#swe-rl)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

# --------------------------------------------------------------------------- linked issues

_CLOSING_RE = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b\s*:?\s+"
    r"(?:(?P<repo>[\w.-]+/[\w.-]+)#|https?://github\.com/(?P<urepo>[\w.-]+/[\w.-]+)/issues/|#)"
    r"(?P<num>\d+)",
    re.IGNORECASE,
)
_PLAIN_RE = re.compile(
    r"(?:(?<![\w/#])(?:(?P<repo>[\w.-]+/[\w.-]+))?#|https?://github\.com/(?P<urepo>[\w.-]+/[\w.-]+)/issues/)"
    r"(?P<num>\d+)\b"
)


def _refs(regex: re.Pattern[str], text: str, repo: str) -> list[int]:
    out = []
    for m in regex.finditer(text):
        other = m["repo"] or m["urepo"]
        if other and other.lower() != repo.lower():
            continue  # another repository's issue: this PR's patch cannot be its fix
        n = int(m["num"])
        if n not in out:
            out.append(n)
    return out


def linked_issue_numbers(
    text: str, repo: str, own_number: int | None = None
) -> tuple[list[int], list[int]]:
    """``(closing, plain)`` same-repository issue numbers referenced in a PR's title + body:
    closing keywords (``fixes #12``, ``closes owner/repo#12``, ``resolves <issue url>``) and
    plain references (``#12``, ``see owner/repo#12``) not already among the closing ones."""
    closing = [n for n in _refs(_CLOSING_RE, text, repo) if n != own_number]
    plain = [n for n in _refs(_PLAIN_RE, text, repo) if n != own_number and n not in closing]
    return closing, plain


# -------------------------------------------------------------------------------- bot PRs

# SWE-RL's rule (docs/methods.md#swe-rl): title/user contains one of these.
BOT_MARKERS = ("[bot]", "dependabot", "renovate", "bump", "automerge")


def is_bot_pr(title: str, user: str, user_type: str = "") -> str | None:
    """The marker that makes this a bot PR, or None."""
    if user_type.lower() == "bot":
        return "user.type == Bot"
    for marker in BOT_MARKERS:
        if marker in user.lower():
            return f"user contains {marker!r}"
        if marker in title.lower():
            return f"title contains {marker!r}"
    return None


# --------------------------------------------------------------------------- test paths

_TEST_DIRS = frozenset({"test", "tests", "testing", "__tests__", "spec", "specs", "e2e"})
_TEST_FILE_RE = re.compile(
    r"^(?:test_.+|.+_tests?|conftest|.+\.(?:test|spec)|.+Tests?|tests?)\.[A-Za-z0-9]+$"
)


def is_test_path(path: str) -> bool:
    """True for files under a test directory or named like tests (``test_x.py``, ``x_test.go``,
    ``conftest.py``, ``x.spec.ts``, ``FooTest.java``)."""
    p = PurePosixPath(path)
    if any(part.lower() in _TEST_DIRS for part in p.parts[:-1]):
        return True
    return bool(_TEST_FILE_RE.match(p.name))


CODE_SUFFIXES = frozenset(
    ".py .pyx .pyi .c .h .cc .cpp .hpp .rs .go .java .kt .scala .js .jsx .ts .tsx .rb .php .cs "
    ".swift .m .sh".split()
)


def is_code_path(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in CODE_SUFFIXES


# ------------------------------------------------------------------------------ licences

LICENCE_FILES = (
    "LICENSE",
    "LICENSE.txt",
    "LICENSE.md",
    "LICENCE",
    "COPYING",
    "COPYING.txt",
    "LICENSE.rst",
)


def classify_licence(text: str) -> str:
    """An SPDX id for common licence texts, ``"unknown"`` otherwise."""
    t = " ".join(text.split()).lower()
    if "apache license" in t and "version 2.0" in t:
        return "Apache-2.0"
    if "permission is hereby granted, free of charge" in t:
        return "MIT"
    if "gnu lesser general public license" in t:
        return "LGPL-3.0" if "version 3" in t else "LGPL-2.1"
    if "gnu affero general public license" in t:
        return "AGPL-3.0"
    if "gnu general public license" in t:
        return "GPL-3.0" if "version 3" in t else "GPL-2.0"
    if "mozilla public license" in t and "2.0" in t:
        return "MPL-2.0"
    if "redistribution and use in source and binary forms" in t:
        return (
            "BSD-3-Clause"
            if "neither the name" in t or "names of its contributors" in t
            else "BSD-2-Clause"
        )
    if "permission to use, copy, modify, and/or distribute this software" in t:
        return "ISC"
    if "this is free and unencumbered software released into the public domain" in t:
        return "Unlicense"
    return "unknown"
