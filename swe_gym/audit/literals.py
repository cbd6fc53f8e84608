"""Literal examples quoted in an issue: the calls a hard-coding patch would special-case, and the
literal values a patch's comparisons may copy from it.

Both read the text as Python where it parses and ignore the rest: an issue is prose with code
in it (doctest lines, pytest's ``where 3 = median([3, 1, 2])``), and only literal values count.
"""

from __future__ import annotations

import ast
import re
from typing import Any

_MAX_CALL_CHARS = 2000


def _balanced(text: str, start: int) -> int | None:
    """Index just past the ``)`` closing the ``(`` at ``start``, or None."""
    depth, quote = 0, ""
    for i in range(start, min(len(text), start + _MAX_CALL_CHARS)):
        c = text[i]
        if quote:
            if c == "\\":
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1 if c == ")" else None
    return None


def issue_calls(text: str, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``(args, kwargs)`` of every call of ``name`` (plain or as an attribute) in ``text`` whose
    arguments are all literals, in order, without repeats."""
    out: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for m in re.finditer(r"(?<![\w])" + re.escape(name) + r"\s*\(", text):
        end = _balanced(text, m.end() - 1)
        if end is None:
            continue
        try:
            call = ast.parse("_f" + text[m.end() - 1 : end], mode="eval").body
        except SyntaxError:
            continue
        if (
            not isinstance(call, ast.Call)
            or any(isinstance(a, ast.Starred) for a in call.args)
            or any(k.arg is None for k in call.keywords)
        ):
            continue
        try:
            args = tuple(ast.literal_eval(a) for a in call.args)
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if (args, kwargs) not in out:
            out.append((args, kwargs))
    return out


_TRIVIAL = {None, True, False, -1, ""}


def issue_literals(text: str) -> set[str]:
    """``repr`` of the non-trivial literal values written in ``text``'s code (fenced blocks,
    inline code, doctest lines), containers included: what a patch that copies an example
    would compare against."""
    found: set[str] = set()
    chunks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
    chunks += [line[4:] for line in text.splitlines() if line.startswith(">>> ")]
    for chunk in chunks:
        for line in chunk.splitlines() or [chunk]:
            line = line.removeprefix(">>> ").removeprefix("... ").strip()
            try:
                tree = ast.parse(line)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                value = _literal(node)
                if value is not None:
                    found.add(value)
    return found


def _literal(node: ast.AST) -> str | None:
    if not isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp)):
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    try:
        if value in _TRIVIAL:
            return None
    except TypeError:  # unhashable: a container, never trivial
        pass
    if isinstance(value, str) and len(value) < 3:
        return None
    return repr(value)


def literal_repr(node: ast.AST) -> str | None:
    """``repr`` of ``node``'s value when it is a non-trivial literal (as ``issue_literals``
    counts them), else None."""
    return _literal(node)


__all__ = ["issue_calls", "issue_literals", "literal_repr"]
