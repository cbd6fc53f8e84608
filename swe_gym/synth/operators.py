"""AST mutation operators: each proposes bugs as precise source-span edits.

A ``Mutation`` replaces the characters ``[start, end)`` of one file with ``replacement``; the
rest of the file is untouched, so the gold patch (the reverse edit) is a minimal diff.
``ast.unparse`` is never used: it would reformat the whole file. Only code inside function
bodies is mutated (a module-level change mostly breaks import, not behaviour), and every
mutation knows the qualified name of the function it lands in.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from swe_gym.synth.source import Located, Mutation, SourceFile

Proposal = tuple[int, int, str]  # start, end, replacement
Operator = Callable[[SourceFile, ast.AST], Iterator[Proposal]]

_SIMPLE = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call)


def _wrapped(src: SourceFile, node: ast.expr) -> str:
    text = src.seg(node)
    return text if isinstance(node, _SIMPLE) else f"({text})"


def _op_between(
    src: SourceFile, left: ast.expr, right: ast.expr, pattern: str, repl: str
) -> Iterator[Proposal]:
    """Replace the operator token found between two operands (parens and spaces around it)."""
    lo, hi = src.span(left)[1], src.span(right)[0]
    gap = src.text[lo:hi]
    if "#" in gap:
        return
    m = re.search(pattern, gap)
    if m:
        yield lo + m.start(), lo + m.end(), repl


_CMP_TOKENS = {
    ast.Eq: (r"==", "=="),
    ast.NotEq: (r"!=", "!="),
    ast.Lt: (r"<(?!=)", "<"),
    ast.LtE: (r"<=", "<="),
    ast.Gt: (r">(?!=)", ">"),
    ast.GtE: (r">=", ">="),
    ast.In: (r"(?<![\w])in(?![\w])", "in"),
    ast.NotIn: (r"not\s+in", "not in"),
    ast.Is: (r"(?<![\w])is(?![\w])(?!\s+not)", "is"),
    ast.IsNot: (r"is\s+not", "is not"),
}
_NEGATE = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


def _compare(src: SourceFile, node: ast.AST, table: dict) -> Iterator[Proposal]:
    if not isinstance(node, ast.Compare):
        return
    operands = [node.left, *node.comparators]
    for i, op in enumerate(node.ops):
        new = table.get(type(op))
        if new is not None:
            yield from _op_between(
                src, operands[i], operands[i + 1], _CMP_TOKENS[type(op)][0], _CMP_TOKENS[new][1]
            )


def comparison_flip(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``a == b`` -> ``a != b``, ``a < b`` -> ``a >= b``, ``in`` -> ``not in``, ``is`` -> ``is not``."""
    yield from _compare(src, node, _NEGATE)


def boundary_shift(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """Off-by-one in a comparison: ``<`` <-> ``<=``, ``>`` <-> ``>=``."""
    yield from _compare(src, node, _BOUNDARY)


def boolean_flip(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``and`` <-> ``or``, ``not x`` -> ``x``, ``True`` <-> ``False``."""
    if isinstance(node, ast.BoolOp):
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        yield from _op_between(src, node.values[0], node.values[1], rf"(?<![\w]){old}(?![\w])", new)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        start, end = src.span(node)
        yield start, end, _wrapped(src, node.operand)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        start, end = src.span(node)
        yield start, end, str(not node.value)


def off_by_one(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``range(.., n)`` -> ``n - 1`` / ``n + 1``; ``x[i]`` -> ``x[i + 1]``; slice bounds shifted."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and 1 <= len(node.args) <= 3
        and not node.keywords
    ):
        stop = node.args[0] if len(node.args) == 1 else node.args[1]
        start, end = src.span(stop)
        for delta in ("- 1", "+ 1"):
            yield start, end, f"{_wrapped(src, stop)} {delta}"
        if len(node.args) >= 2:
            start, end = src.span(node.args[0])
            yield start, end, f"{_wrapped(src, node.args[0])} + 1"
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        idx = node.slice
        if isinstance(idx, ast.Slice):
            for bound in (idx.lower, idx.upper):
                if bound is not None:
                    start, end = src.span(bound)
                    yield start, end, _shift_int(bound) or f"{_wrapped(src, bound)} + 1"
        elif isinstance(idx, (ast.Name, ast.BinOp)) or _int_value(idx) is not None:
            start, end = src.span(idx)
            yield start, end, _shift_int(idx) or f"{_wrapped(src, idx)} + 1"


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    return None


def _shift_int(node: ast.AST) -> str | None:
    value = _int_value(node)
    if value is None:
        return None
    return str(value - 1 if value < 0 else value + 1)  # x[-1] -> x[-2], x[0] -> x[1]


def swap_arguments(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``f(a, b)`` -> ``f(b, a)`` (the first two positional arguments)."""
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return
    a, b = node.args[0], node.args[1]
    if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
        return
    ta, tb = src.seg(a), src.seg(b)
    if ta == tb or a.end_lineno != b.lineno:
        return
    start, end = src.span(a)[0], src.span(b)[1]
    yield start, end, tb + src.text[src.span(a)[1] : src.span(b)[0]] + ta


_ARITH = {
    ast.Add: (r"(?<![+*/])\+(?!=)", "-"),
    ast.Sub: (r"-(?!=)", "+"),
    ast.Mult: (r"(?<!\*)\*(?![*=])", "/"),
    ast.FloorDiv: (r"//", "/"),
    ast.Div: (r"(?<!/)/(?![/=])", "//"),
}


def arithmetic_swap(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``+`` <-> ``-``, ``*`` -> ``/``, ``//`` <-> ``/``; and ``a - b`` -> ``b - a``."""
    if not isinstance(node, ast.BinOp):
        return
    entry = _ARITH.get(type(node.op))
    if entry is not None:
        yield from _op_between(src, node.left, node.right, entry[0], entry[1])
    if (
        isinstance(node.op, (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod))
        and node.left.end_lineno == node.right.lineno
    ):
        ls, le = src.span(node.left)
        rs, re_ = src.span(node.right)
        left, right = src.text[ls:le], src.text[rs:re_]
        if left != right:
            yield ls, re_, right + src.text[le:rs] + left


_REMOVABLE = (
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Continue,
    ast.Break,
    ast.Raise,
    ast.Delete,
)


def _remove_stmt(src: SourceFile, stmt: ast.stmt, block: list[ast.stmt]) -> Iterator[Proposal]:
    if not src.owns_lines(stmt):
        return
    start, end = src.node_lines(stmt)
    if len(block) == 1:  # keep the block syntactically valid
        yield start, end, f"{src.indent(stmt.lineno)}pass\n"
    else:
        yield start, end, ""


def remove_statement(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """Delete one statement (a call, an assignment, ``continue``/``break``/``raise``)."""
    for block in _blocks(node):
        for i, stmt in enumerate(block):
            if not isinstance(stmt, _REMOVABLE):
                continue
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            yield from _remove_stmt(src, stmt, block)


def remove_condition(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """Drop an ``if`` guard (no ``else``) entirely, or make its condition always true."""
    for block in _blocks(node):
        for stmt in block:
            if isinstance(stmt, ast.If):
                start, end = src.span(stmt.test)
                yield start, end, "True"
                if not stmt.orelse:
                    yield from _remove_stmt(src, stmt, block)


def wrong_return(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``return x`` -> ``return None``; a returned constant changed (``True`` -> ``False``, ``n`` -> ``n + 1``)."""
    if not isinstance(node, ast.Return) or node.value is None:
        return
    value = node.value
    start, end = src.span(value)
    if isinstance(value, ast.Constant):
        if value.value is None:
            return
        if isinstance(value.value, bool):
            yield start, end, str(not value.value)
        elif isinstance(value.value, (int, float)):
            yield start, end, repr(value.value + 1)
        elif isinstance(value.value, str):
            yield start, end, '""' if value.value else '" "'
        return
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        return  # boolean_flip covers it
    yield start, end, "None"


def change_constant(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """A numeric literal changed: ``n`` -> ``n + 1`` (and ``n - 1`` when positive); ``x`` -> ``2 * x`` for floats."""
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return
    start, end = src.span(node)
    if type(node.value) is int:
        yield start, end, str(node.value + 1)
        if node.value > 0:
            yield start, end, str(node.value - 1)
    elif isinstance(node.value, float):
        yield start, end, repr(node.value * 2 if node.value else 1.0)


def drop_exception_handling(src: SourceFile, node: ast.AST) -> Iterator[Proposal]:
    """``try: body except ...: handler`` -> ``body`` (dedented): the exception now escapes."""
    for block in _blocks(node):
        for stmt in block:
            if not isinstance(stmt, ast.Try) or stmt.finalbody or stmt.orelse or not stmt.handlers:
                continue
            if not src.owns_lines(stmt):
                continue
            outer, inner = src.indent(stmt.lineno), src.indent(stmt.body[0].lineno)
            if not inner.startswith(outer) or inner == outer:
                continue
            cut = len(inner) - len(outer)
            body = src.lines[stmt.body[0].lineno - 1 : stmt.body[-1].end_lineno]
            if any(line.strip() and not line.startswith(inner) for line in body):
                continue  # a multi-line string or odd indentation: dedenting would change it
            new = "".join(line[cut:] if line.strip() else line for line in body)
            start, end = src.node_lines(stmt)
            yield start, end, new


def _blocks(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(node, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(node, "handlers", None) or []:
        yield handler.body


OPERATORS: dict[str, Operator] = {
    "comparison_flip": comparison_flip,
    "boundary_shift": boundary_shift,
    "boolean_flip": boolean_flip,
    "off_by_one": off_by_one,
    "swap_arguments": swap_arguments,
    "arithmetic_swap": arithmetic_swap,
    "remove_statement": remove_statement,
    "remove_condition": remove_condition,
    "wrong_return": wrong_return,
    "change_constant": change_constant,
    "drop_exception_handling": drop_exception_handling,
}


def _function_nodes(
    tree: ast.Module,
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, list[ast.AST]]]:
    """(qualname, function node, nodes of its body that belong to it and not to nested defs)."""

    def walk(
        node: ast.AST, prefix: str
    ) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, list[ast.AST]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{prefix}{child.name}"
                own: list[ast.AST] = []
                stack: list[ast.AST] = list(reversed(child.body))
                while stack:
                    n = stack.pop()
                    if isinstance(
                        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
                    ):
                        continue
                    own.append(n)
                    kids = [
                        k
                        for k in ast.iter_child_nodes(n)
                        if not (isinstance(n, ast.AnnAssign) and k is n.annotation)
                    ]
                    stack.extend(reversed(kids))
                yield qual, child, own
                yield from walk(child, f"{qual}.<locals>.")

    yield from walk(tree, "")


def _is_generator(nodes: list[ast.AST]) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes)


class _Checker:
    """Does a mutant parse and differ from the original as an AST? Checked on the function's
    own lines (dedented), not the whole file: a large module has thousands of candidates."""

    def __init__(self, src: SourceFile, tree: ast.Module):
        self.src, self.tree = src, tree
        self._funcs: dict[int, tuple[int, str, str] | None] = {}
        self._module: str | None = None

    @staticmethod
    def _dedent(text: str, indent: str) -> str | None:
        out = []
        for line in text.splitlines(keepends=True):
            if line.startswith(indent):
                out.append(line[len(indent) :])
            elif not line.strip():
                out.append("\n")
            else:
                return None  # e.g. a multi-line string less indented than the def
        return "".join(out)

    def _function(self, func: Located) -> tuple[int, str, str] | None:
        if id(func) not in self._funcs:
            start, end = self.src.node_lines(func)
            indent = self.src.indent(func.lineno)
            seg = self.src.text[start:end]
            body = self._dedent(seg, indent)
            try:
                entry = (start, seg, ast.dump(ast.parse(body))) if body is not None else None
            except SyntaxError:
                entry = None
            self._funcs[id(func)] = entry
        return self._funcs[id(func)]

    def ok(self, func: Located, m: Mutation) -> bool:
        entry = self._function(func)
        try:
            if entry is not None:
                start, seg, original = entry
                mutant = seg[: m.start - start] + m.replacement + seg[m.end - start :]
                body = self._dedent(mutant, self.src.indent(func.lineno))
                if body is not None:
                    return ast.dump(ast.parse(body)) != original
            if self._module is None:
                self._module = ast.dump(self.tree)
            return ast.dump(ast.parse(m.apply(self.src.text))) != self._module
        except (SyntaxError, ValueError):
            return False


def mutations_of(path: str, text: str, operators: list[str] | None = None) -> list[Mutation]:
    """Every mutation of one file's functions, in source order; unparsable files give none.

    Each proposal is kept only if the mutant parses and differs from the original as an AST
    (a change inside parentheses or a comment is no bug)."""
    chosen = operators or list(OPERATORS)
    unknown = [o for o in chosen if o not in OPERATORS]
    if unknown:
        raise ValueError(f"unknown operator(s) {unknown}; accepted: {', '.join(OPERATORS)}")
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    src = SourceFile(path, text)
    checker = _Checker(src, tree)
    out: list[Mutation] = []
    seen: set[tuple[int, int, str]] = set()
    for qualname, func, nodes in _function_nodes(tree):
        generator = _is_generator(nodes)
        for node in [func, *nodes]:
            for name in chosen:
                if name == "wrong_return" and generator:
                    continue
                if node is func and name not in _BLOCK_OPERATORS:
                    continue
                for start, end, repl in OPERATORS[name](src, node):
                    if (start, end, repl) in seen:
                        continue
                    seen.add((start, end, repl))
                    m = Mutation(path, name, qualname, start, end, repl, src.lineno_of(start))
                    if checker.ok(func, m):
                        out.append(m)
    return out


_BLOCK_OPERATORS = ("remove_statement", "remove_condition", "drop_exception_handling")
