"""``str_replace_editor``: view, create, str_replace, insert, undo_edit, through any sandbox.

Messages follow SWE-agent's / Anthropic's editor tool so models trained on those transfer.
File access goes through ``Sandbox.read_file``/``write_file`` (works on every backend); a
directory listing runs ``find`` in the sandbox. An editor error is a tool result for the
agent, not an exception.
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from swe_gym.sandbox import Sandbox

SNIPPET_LINES = 4
MAX_VIEW_CHARS = 16_000


class EditorError(Exception):
    """A user-facing editor error: its message is the observation."""


class Editor:
    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self._history: dict[str, list[str]] = {}

    def __call__(self, args: dict[str, Any]) -> str:
        try:
            return self._dispatch(args)
        except EditorError as e:
            return f"ERROR: {e}"

    # -- helpers -------------------------------------------------------------------------

    def _abspath(self, path: str) -> str:
        root = self.sandbox.workdir.rstrip("/")
        full = posixpath.normpath(path if path.startswith("/") else posixpath.join(root, path))
        if full != root and not full.startswith(root + "/"):
            raise EditorError(f"The path {path} is outside the repository {root}; edit files under {root}.")
        return full

    def _exists(self, full: str) -> str | None:
        res = self.sandbox.run(
            f"if [ -d {shlex.quote(full)} ]; then echo dir; elif [ -f {shlex.quote(full)} ]; then echo file; else echo none; fi",
            timeout=30,
        )
        kind = res.output.strip().splitlines()[-1] if res.output.strip() else "none"
        return None if kind == "none" else kind

    def _read(self, full: str) -> str:
        data = self.sandbox.read_file(full)
        if b"\x00" in data[:8192]:
            raise EditorError(f"{full} is a binary file; the editor only handles text files.")
        return data.decode("utf-8", errors="replace")

    def _write(self, full: str, text: str) -> None:
        self.sandbox.write_file(full, text.encode("utf-8"))

    @staticmethod
    def _numbered(text: str, start: int = 1) -> str:
        return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))

    def _snippet(self, full: str, text: str, center_line: int, n_new: int) -> str:
        lines = text.split("\n")
        start = max(0, center_line - SNIPPET_LINES)
        end = min(len(lines), center_line + n_new + SNIPPET_LINES)
        snippet = "\n".join(lines[start:end])
        return (
            f"The file {full} has been edited. Here's the result of running `cat -n` on a snippet of {full}:\n"
            f"{self._numbered(snippet, start + 1)}\n"
            "Review the changes and make sure they are as expected. Edit the file again if necessary."
        )

    # -- commands ------------------------------------------------------------------------

    def _dispatch(self, a: dict[str, Any]) -> str:
        full = self._abspath(a["path"])
        cmd = a["command"]
        kind = self._exists(full)
        if cmd == "create":
            if kind is not None:
                raise EditorError(f"File already exists at: {full}. Cannot overwrite files using command `create`.")
            text = a["file_text"]
            if text and not text.endswith("\n"):
                text += "\n"
            parent = posixpath.dirname(full)
            self.sandbox.run(f"mkdir -p {shlex.quote(parent)}", timeout=30)
            self._write(full, text)
            self._history.setdefault(full, []).append("\0__created__")
            return f"File created successfully at: {full}"
        if kind is None:
            raise EditorError(f"The path {full} does not exist. Please provide a valid path.")
        if cmd == "view":
            return self._view(full, kind, a.get("view_range"))
        if kind == "dir":
            raise EditorError(f"The path {full} is a directory; only `view` works on directories.")
        if cmd == "str_replace":
            return self._str_replace(full, a["old_str"], a.get("new_str", ""))
        if cmd == "insert":
            return self._insert(full, a["insert_line"], a["new_str"])
        if cmd == "undo_edit":
            return self._undo(full)
        raise EditorError(f"unknown command {cmd!r}; choose one of: view, create, str_replace, insert, undo_edit")

    def _view(self, full: str, kind: str, view_range: list[int] | None) -> str:
        if kind == "dir":
            if view_range:
                raise EditorError("view_range is not allowed when path points to a directory.")
            res = self.sandbox.run(
                f"cd {shlex.quote(full)} && find . -maxdepth 2 -not -path '*/.*' | sort", timeout=30
            )
            listing = "\n".join(
                posixpath.normpath(posixpath.join(full, line)) for line in res.output.splitlines() if line.strip()
            )
            return (
                f"Here are the files and directories up to 2 levels deep in {full}, excluding hidden items:\n{listing}"
            )
        text = self._read(full)
        start = 1
        if view_range:
            lines = text.split("\n")
            lo, hi = view_range
            if not 1 <= lo <= len(lines):
                raise EditorError(f"Invalid view_range {view_range}: the first line must be in [1, {len(lines)}].")
            if hi != -1 and not lo <= hi:
                raise EditorError(f"Invalid view_range {view_range}: the end must be >= the start, or -1.")
            text = "\n".join(lines[lo - 1 :] if hi == -1 else lines[lo - 1 : hi])
            start = lo
        body = self._numbered(text, start)
        if len(body) > MAX_VIEW_CHARS:
            body = body[:MAX_VIEW_CHARS] + "\n<response clipped: view a smaller range with --view_range>"
        return f"Here's the result of running `cat -n` on {full}:\n{body}"

    def _str_replace(self, full: str, old: str, new: str) -> str:
        text = self._read(full)
        count = text.count(old)
        if count == 0:
            raise EditorError(f"No replacement was performed, old_str `{old}` did not appear verbatim in {full}.")
        if count > 1:
            lines = [i + 1 for i, line in enumerate(text.split("\n")) if old.split("\n")[0] in line]
            raise EditorError(
                f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines {lines}. "
                "Please ensure it is unique."
            )
        self._history.setdefault(full, []).append(text)
        new_text = text.replace(old, new)
        self._write(full, new_text)
        line = text.split(old)[0].count("\n")
        return self._snippet(full, new_text, line, new.count("\n") + 1)

    def _insert(self, full: str, line: int, new: str) -> str:
        text = self._read(full)
        lines = text.split("\n")
        n = len(lines) - (1 if text.endswith("\n") else 0)
        if not 0 <= line <= n:
            raise EditorError(f"Invalid insert_line {line}: it must be in [0, {n}] (0 inserts at the top).")
        self._history.setdefault(full, []).append(text)
        new_lines = new.split("\n")
        if new.endswith("\n"):
            new_lines = new_lines[:-1]
        out = "\n".join(lines[:line] + new_lines + lines[line:])
        self._write(full, out)
        return self._snippet(full, out, line, len(new_lines))

    def _undo(self, full: str) -> str:
        history = self._history.get(full)
        if not history:
            raise EditorError(f"No edit history found for {full}.")
        previous = history.pop()
        if previous == "\0__created__":
            self.sandbox.run(f"rm -f {shlex.quote(full)}", timeout=30)
            return f"Last edit to {full} undone successfully (the file was removed)."
        self._write(full, previous)
        return f"Last edit to {full} undone successfully. Here's the result of running `cat -n` on {full}:\n{self._numbered(previous)}"
