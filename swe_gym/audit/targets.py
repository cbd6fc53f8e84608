"""What an audit attacks: the source files the gold patch changes (before and after it) and the
functions in them whose lines it touches."""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from swe_gym.repos import local_repo
from swe_gym.swerl.apply import PatchApplyError, apply_patch
from swe_gym.synth.derived import read_tree_files
from swe_gym.tasks import Task


@dataclass(frozen=True)
class Target:
    """A function the gold patch touches. ``owner`` is its class (top-level) or None for a
    module-level function; ``kind`` is how the class holds it (function, staticmethod,
    classmethod, property)."""

    path: str
    qualname: str
    name: str
    owner: str | None
    kind: str
    fixed_source: str  # the gold-fixed ``def`` (dedented, decorators left out)

    @property
    def takes_self(self) -> bool:
        """Whether the first positional argument is the instance or class, not an input."""
        return self.owner is not None and self.kind in ("function", "classmethod", "property")


@dataclass(frozen=True)
class Sources:
    """The gold patch's Python files at ``base_commit`` (``base``) and after the gold patch
    (``fixed``); ``targets`` the functions whose lines it touches."""

    base: dict[str, str]
    fixed: dict[str, str | None]  # every text file of the gold patch after it (None: deleted)
    targets: list[Target]
    root_conftest: str | None = None  # the repository's top-level conftest.py, if any


def read_sources(task: Task, repos_dir: str | os.PathLike | None = None) -> Sources:
    """The task's changed Python files read from its local repository (raises
    ``SandboxUnavailable`` with what to pass when there is none, ``PatchApplyError`` when the
    gold patch does not apply to them)."""
    repo = local_repo(task.repo, repos_dir or task.extra.get("repos_dir"))
    base = read_tree_files(Path(repo), task.base_commit, task.code_files)
    try:
        new = apply_patch(base, task.patch)
    except PatchApplyError as e:
        raise PatchApplyError(
            f"{task.instance_id}: the gold patch does not apply at base_commit "
            f"{task.base_commit[:12]}: {e}"
        ) from e
    targets: list[Target] = []
    for path, text in sorted(new.items()):
        if text is not None and path.endswith(".py") and path in base:
            targets += touched_functions(path, text, _changed_lines(base[path], text))
    conftest = read_tree_files(Path(repo), task.base_commit, ["conftest.py"]).get("conftest.py")
    return Sources(base=base, fixed=new, targets=targets, root_conftest=conftest)


def _changed_lines(base: str, fixed: str) -> set[int]:
    """1-based line numbers of ``fixed`` that the change from ``base`` adds or replaces, and for
    a pure removal the line where it happened."""
    a, b = base.splitlines(), fixed.splitlines()
    lines: set[int] = set()
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        lines.update(range(j1 + 1, j2 + 1) if j2 > j1 else {j1, j1 + 1})
    return lines


_DECORATOR_KINDS = {
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
    "property": "property",
}


def touched_functions(path: str, text: str, lines: set[int]) -> list[Target]:
    """Module-level functions and methods of top-level classes that hold a line of ``lines``
    (nested functions and classes are left out: the exploits reach a name, and theirs is local)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    src_lines = text.splitlines(keepends=True)
    out: list[Target] = []

    def add(node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None) -> None:
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        end = node.end_lineno or node.lineno
        if not any(first <= n <= end for n in lines):
            return
        kinds = [
            _DECORATOR_KINDS[d.id]
            for d in node.decorator_list
            if isinstance(d, ast.Name) and d.id in _DECORATOR_KINDS
        ]
        if owner is None and kinds:
            return
        body = "".join(src_lines[node.lineno - 1 : end])
        indent = len(body) - len(body.lstrip())
        source = "".join(
            line[indent:] if line[:indent].strip() == "" else line
            for line in body.splitlines(keepends=True)
        )
        qual = f"{owner}.{node.name}" if owner else node.name
        out.append(Target(path, qual, node.name, owner, kinds[0] if kinds else "function", source))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node, None)
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(child, node.name)
    return out


__all__ = ["Sources", "Target", "read_sources", "touched_functions"]
