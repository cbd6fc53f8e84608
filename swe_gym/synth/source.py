"""Source text and edits: a mutation as a character span of one file, and ``ast`` positions
(UTF-8 byte columns) converted to character offsets."""

from __future__ import annotations

import ast
import bisect
import hashlib
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Located", "Mutation", "SourceFile", "end_of"]


class Located(Protocol):
    """A node with a position (``ast.stmt``, ``ast.expr``, ``ast.arg``...)."""

    lineno: int
    col_offset: int
    end_lineno: int | None
    end_col_offset: int | None


def end_of(node: Located) -> tuple[int, int]:
    """The end (line, byte column) of a node from ``ast.parse``, which always sets both
    (typeshed has them optional: a node built by hand may lack them)."""
    if node.end_lineno is None or node.end_col_offset is None:
        raise ValueError(f"{type(node).__name__} at line {node.lineno} has no end position")
    return node.end_lineno, node.end_col_offset


@dataclass(frozen=True)
class Mutation:
    path: str  # repository-relative, posix
    operator: str
    qualname: str  # function the edit lands in, e.g. "Table.render.<locals>.cell"
    start: int  # character offsets into the original text
    end: int
    replacement: str
    lineno: int  # 1-based first line of the edit (for metadata, never for the issue text)

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]

    def key(self, text: str) -> str:
        """Identity of the resulting program: two operators making the same edit are one bug.

        The edit is trimmed to the characters it really changes (``<`` -> ``<=`` over the span
        ``<`` is the same edit as ``""`` -> ``=`` after it), so equal programs get equal keys
        without hashing whole files."""
        old, new, start = text[self.start : self.end], self.replacement, self.start
        while old and new and old[0] == new[0]:
            old, new, start = old[1:], new[1:], start + 1
        while old and new and old[-1] == new[-1]:
            old, new = old[:-1], new[:-1]
        return hashlib.sha256(f"{self.path}\0{start}\0{old}\0{new}".encode()).hexdigest()[:16]


class SourceFile:
    """A file's text with conversions from ``ast`` positions (UTF-8 byte columns) to offsets."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text
        self.lines = text.splitlines(keepends=True)
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self._starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def lineno_of(self, offset: int) -> int:
        return (
            bisect.bisect_right(self._starts, offset)
            if offset < self._starts[-1]
            else len(self.lines)
        )

    def span(self, node: Located) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(*end_of(node))

    def seg(self, node: Located) -> str:
        s, e = self.span(node)
        return self.text[s:e]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Offsets covering whole lines ``first..last`` (1-based, inclusive)."""
        return self._starts[first - 1], self._starts[last]

    def node_lines(self, node: Located) -> tuple[int, int]:
        """Offsets covering the whole lines of ``node``."""
        return self.line_span(node.lineno, end_of(node)[0])

    def owns_lines(self, node: ast.stmt) -> bool:
        """The statement alone occupies its lines (no ``a; b``, nothing after it)."""
        end_line, end_col = end_of(node)
        first, last = self.lines[node.lineno - 1], self.lines[end_line - 1]
        before = first.encode()[: node.col_offset].decode("utf-8", "replace")
        after = last.encode()[end_col:].decode("utf-8", "replace").strip()
        return not before.strip() and (not after or after.startswith("#"))

    def indent(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[: len(line) - len(line.lstrip())]
