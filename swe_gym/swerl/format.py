"""Parse an SWE-RL response: ``<think>...</think><solution>...</solution>`` holding
SEARCH/REPLACE blocks (docs/methods.md#swe-rl).

A block is a fenced code block::

    ```python
    ### path/to/file.py
    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE
    ```

Parsing never raises on model output: problems come back as a ``FormatError`` carrying a stable
reason code (``REASONS``) so callers can count them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SOLUTION_OPEN, SOLUTION_CLOSE = "<solution>", "</solution>"

# Reason codes, one per format check. Stable strings: logged and counted by trainers.
REASONS = {
    "think_tag_count": "<think> and </think> must each appear exactly once",
    "solution_tag_count": "<solution> and </solution> must each appear exactly once",
    "tag_order": "expected <think>...</think> before <solution>...</solution>",
    "empty_thought": "the <think> block is empty",
    "no_edit_block": "the solution holds no SEARCH/REPLACE block",
    "search_equals_replace": "a block's SEARCH and REPLACE text are identical",
    "unknown_file": "a block edits a file that is not in the code context",
    "search_not_found": "a block's SEARCH text does not occur in the file",
    "search_ambiguous": "a block's SEARCH text occurs more than once in the file",
}

# The SWE-RL reference format: a fence line (any info string), "### path", the markers, each on
# its own line, the closing fence. Lazy bodies so several blocks in one solution stay separate.
_BLOCK_RE = re.compile(
    r"^```[^\n]*\n"
    r"### (?P<path>[^\n]+?)[ \t]*\n"
    r"<<<<<<< SEARCH\n(?P<search>.*?)(?:\n)?^=======[ \t]*\n"
    r"(?P<replace>.*?)(?:\n)?^>>>>>>> REPLACE[ \t]*\n"
    r"```",
    re.DOTALL | re.MULTILINE,
)


class FormatError(ValueError):
    """A response that breaks the SWE-RL output format. ``reason`` is a key of ``REASONS``."""

    def __init__(self, reason: str, detail: str = ""):
        assert reason in REASONS, reason
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {REASONS[reason]}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class SearchReplaceEdit:
    """One SEARCH/REPLACE block. ``search``/``replace`` are whole lines without the final newline."""

    path: str
    search: str
    replace: str

    def to_text(self) -> str:
        """Render the block back in the format it was parsed from."""
        lines = ["```", f"### {self.path}", "<<<<<<< SEARCH"]
        lines += [self.search] if self.search else []
        lines.append("=======")
        lines += [self.replace] if self.replace else []
        lines += [">>>>>>> REPLACE", "```"]
        return "\n".join(lines)


@dataclass(frozen=True)
class ParsedResponse:
    thought: str
    solution: str
    edits: list[SearchReplaceEdit]


def _one(text: str, open_tag: str, close_tag: str, reason: str) -> None:
    n_open, n_close = text.count(open_tag), text.count(close_tag)
    if n_open != 1 or n_close != 1:
        raise FormatError(reason, f"found {n_open} x {open_tag} and {n_close} x {close_tag}")


def extract_thought_solution(response: str) -> tuple[str, str]:
    """Return ``(thought, solution)``, both stripped; raise ``FormatError`` otherwise."""
    _one(response, THINK_OPEN, THINK_CLOSE, "think_tag_count")
    _one(response, SOLUTION_OPEN, SOLUTION_CLOSE, "solution_tag_count")
    t0, t1 = response.index(THINK_OPEN), response.index(THINK_CLOSE)
    s0, s1 = response.index(SOLUTION_OPEN), response.index(SOLUTION_CLOSE)
    if not (t0 < t1 < s0 < s1):
        raise FormatError("tag_order")
    thought = response[t0 + len(THINK_OPEN) : t1].strip()
    solution = response[s0 + len(SOLUTION_OPEN) : s1].strip()
    if not thought:
        raise FormatError("empty_thought")
    return thought, solution


def parse_edits(solution: str) -> list[SearchReplaceEdit]:
    """All SEARCH/REPLACE blocks in ``solution``, in order (may be empty)."""
    text = solution.replace("\r\n", "\n")
    if not text.endswith("\n"):
        text += "\n"
    return [
        SearchReplaceEdit(m["path"].strip(), m["search"], m["replace"])
        for m in _BLOCK_RE.finditer(text)
    ]


def parse_response(response: str) -> ParsedResponse:
    """Check the tags and parse the blocks. Raises ``FormatError`` (tags, thought, no block,
    SEARCH == REPLACE); checks that need the files (path, SEARCH found once) are in ``apply``."""
    thought, solution = extract_thought_solution(response)
    edits = parse_edits(solution)
    if not edits:
        raise FormatError("no_edit_block")
    for i, e in enumerate(edits):
        if e.search == e.replace:
            raise FormatError("search_equals_replace", f"block {i + 1} on {e.path}")
    return ParsedResponse(thought, solution, edits)


def render_response(thought: str, edits: list[SearchReplaceEdit]) -> str:
    """A well-formed response holding ``edits`` (the inverse of ``parse_response``)."""
    blocks = "\n\n".join(e.to_text() for e in edits)
    return f"{THINK_OPEN}\n{thought}\n{THINK_CLOSE}\n{SOLUTION_OPEN}\n{blocks}\n{SOLUTION_CLOSE}"
