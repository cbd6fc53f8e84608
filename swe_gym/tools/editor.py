"""``str_replace_editor``: view, create, str_replace, insert, undo_edit, through any sandbox.

Messages follow SWE-agent's / Anthropic's editor tool so models trained on those transfer.
File access goes through ``Sandbox.read_file``/``write_file`` (works on every backend); a
directory listing runs ``find`` in a subshell of the sandbox's shell, so no editor command
moves the agent's working directory. What is at a path and how big it is come from the
sandbox (``path_kind``, ``read_file(max_bytes=)``), never from the agent's shell, where ``stat``
or ``[`` may be functions that lie. An error the agent caused (a missing path, a symlink
out of the repository, a directory, a permission, bytes that are not text) is a tool result
starting with ``ERROR:``, not an exception; ``SandboxError`` (the sandbox itself failed) is
left to the caller, which can tell a dead sandbox from a refused file.

Files are decoded with ``surrogateescape`` so an edit writes back every byte it did not
change (a Latin-1 comment survives a ``str_replace`` elsewhere); what is shown replaces
undecodable bytes with U+FFFD.
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from swe_gym.errors import FileTooLarge
from swe_gym.sandbox import Sandbox

SNIPPET_LINES = 4
MAX_VIEW_CHARS = 16_000
MAX_FILE_BYTES = 10_000_000  # larger files are refused: the editor holds a file in memory
MAX_QUOTE_CHARS = 2_000  # of the agent's old_str quoted back in an error


class EditorError(Exception):
    """A user-facing editor error: its message is the observation."""


class Editor:
    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self._history: dict[str, list[str]] = {}

    def copy_to(self, sandbox: Sandbox) -> Editor:
        """An editor on ``sandbox`` (a fork's child) with a copy of this one's undo history."""
        other = Editor(sandbox)
        other._history = {path: list(states) for path, states in self._history.items()}
        return other

    def __call__(self, args: dict[str, Any]) -> str:
        try:
            return self._dispatch(args)
        except EditorError as e:
            return f"ERROR: {e}"
        except (ValueError, OSError) as e:  # UnicodeError is a ValueError
            # The sandbox refused the file (a symlink out of the repository, a directory, a
            # permission, a name too long): the agent's doing, so a message, not a crash.
            return f"ERROR: {_describe(e)} (path: {_quote(str(args.get('path')))})"

    # -- helpers -------------------------------------------------------------------------

    def _abspath(self, path: str) -> str:
        root = self.sandbox.workdir.rstrip("/")
        full = posixpath.normpath(path if path.startswith("/") else posixpath.join(root, path))
        if full != root and not full.startswith(root + "/"):
            raise EditorError(
                f"The path {path} is outside the repository {root}; edit files under {root}."
            )
        return full

    def _kind(self, full: str) -> str | None:
        """``"dir"``, ``"file"``, ``"other"`` (a FIFO, a device, a dangling link: never opened,
        since opening a FIFO blocks) or None (nothing there). Asked of the sandbox, not of the
        agent's shell: there ``stat``, ``[`` or ``test`` may be functions that lie."""
        return self.sandbox.path_kind(full)

    def _read(self, full: str) -> str:
        # The size limit is enforced by the reader from its own stat of the file.
        try:
            data = self.sandbox.read_file(full, max_bytes=MAX_FILE_BYTES)
        except FileTooLarge as e:
            raise EditorError(
                f"{full} is {e.size} bytes, more than the editor handles ({MAX_FILE_BYTES}); "
                "use head, tail or sed -n '10,40p' FILE."
            ) from None
        if b"\x00" in data[:8192]:
            raise EditorError(f"{full} is a binary file; the editor only handles text files.")
        return data.decode("utf-8", errors="surrogateescape")

    def _write(self, full: str, text: str) -> None:
        try:
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise EditorError(
                f"the text holds {text[e.start : e.end]!r}, a lone surrogate, which is not valid "
                "Unicode; nothing was written."
            ) from None
        self.sandbox.write_file(full, data)

    @staticmethod
    def _numbered(text: str, start: int = 1) -> str:
        body = "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))
        return _shown(body)

    def _snippet(self, full: str, text: str, center_line: int, n_new: int) -> str:
        lines = text.split("\n")
        start = max(0, center_line - SNIPPET_LINES)
        end = min(len(lines), center_line + n_new + SNIPPET_LINES)
        snippet = "\n".join(lines[start:end])
        return (
            f"The file {full} has been edited. Here's the result of running `cat -n` on a snippet of {full}:\n"
            f"{_clip(self._numbered(snippet, start + 1), 'view a range with --view_range')}\n"
            "Review the changes and make sure they are as expected. Edit the file again if necessary."
        )

    # -- commands ------------------------------------------------------------------------

    def _dispatch(self, a: dict[str, Any]) -> str:
        full = self._abspath(a["path"])
        cmd = a["command"]
        kind = self._kind(full)
        if cmd == "create":
            if kind is not None:
                raise EditorError(
                    f"File already exists at: {full}. Cannot overwrite files using command `create`."
                )
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
        if kind == "other":
            raise EditorError(
                f"The path {full} is not a regular file or directory (a FIFO, a device or a "
                "broken symlink); the editor only opens regular files."
            )
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
        raise EditorError(
            f"unknown command {cmd!r}; choose one of: view, create, str_replace, insert, undo_edit"
        )

    def _view(self, full: str, kind: str, view_range: list[int] | None) -> str:
        if kind == "dir":
            if view_range:
                raise EditorError("view_range is not allowed when path points to a directory.")
            # A subshell: the agent's shell keeps its working directory.
            res = self.sandbox.run(
                f"(cd {shlex.quote(full)} && find . -maxdepth 2 -not -path '*/.*' | sort)",
                timeout=30,
            )
            listing = "\n".join(
                posixpath.normpath(posixpath.join(full, line))
                for line in res.output.splitlines()
                if line.strip()
            )
            return _clip(
                "Here are the files and directories up to 2 levels deep in "
                f"{full}, excluding hidden items:\n{listing}",
                "list a smaller directory",
            )
        text = self._read(full)
        start = 1
        if view_range:
            lines = text.split("\n")
            lo, hi = view_range
            if not 1 <= lo <= len(lines):
                raise EditorError(
                    f"Invalid view_range {view_range}: the first line must be in [1, {len(lines)}]."
                )
            if hi != -1 and not lo <= hi:
                raise EditorError(
                    f"Invalid view_range {view_range}: the end must be >= the start, or -1."
                )
            text = "\n".join(lines[lo - 1 :] if hi == -1 else lines[lo - 1 : hi])
            start = lo
        body = _clip(self._numbered(text, start), "view a smaller range with --view_range")
        return f"Here's the result of running `cat -n` on {full}:\n{body}"

    def _str_replace(self, full: str, old: str, new: str) -> str:
        text = self._read(full)
        count = text.count(old)
        if count == 0:
            raise EditorError(
                f"No replacement was performed, old_str `{_quote(old)}` did not appear verbatim in {full}."
            )
        if count > 1:
            first = old.split("\n", 1)[0]
            lines = [i + 1 for i, line in enumerate(text.split("\n")) if first in line]
            raise EditorError(
                f"No replacement was performed. Multiple occurrences of old_str `{_quote(old)}` in lines "
                f"{_quote(str(lines))}. Please ensure it is unique."
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
            raise EditorError(
                f"Invalid insert_line {line}: it must be in [0, {n}] (0 inserts at the top)."
            )
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
        body = _clip(self._numbered(previous), "view a range with --view_range")
        return (
            f"Last edit to {full} undone successfully. "
            f"Here's the result of running `cat -n` on {full}:\n{body}"
        )


def _shown(text: str) -> str:
    """``text`` as the agent sees it: undecodable bytes (surrogate escapes) become U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _clip(text: str, hint: str) -> str:
    if len(text) <= MAX_VIEW_CHARS:
        return text
    return text[:MAX_VIEW_CHARS] + f"\n<response clipped: {hint}>"


def _quote(text: str) -> str:
    if len(text) <= MAX_QUOTE_CHARS:
        return _shown(text)
    return _shown(text[:MAX_QUOTE_CHARS]) + f"... ({len(text) - MAX_QUOTE_CHARS} more characters)"


def _describe(e: BaseException) -> str:
    """One line for an ``OSError``/``ValueError`` from the sandbox's file access."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror  # not e.filename: that may be the host's path of the file
    return _quote(str(e)) or type(e).__name__
