"""A scripted oracle policy: solves a task through the env's own tools from its gold patch.

For each file of the gold patch it emits editor actions: ``create`` for new files, one
``str_replace`` per hunk for modified files (old text = the hunk's context and removed lines, new
text = context and added lines), and a ``bash`` ``rm`` for deleted files. Where a hunk cannot be
replayed as a unique ``str_replace`` (ambiguous text, pure insertion with no context, a missing
final newline) it falls back to ``git apply`` of that file's diff through ``bash``. It looks around
first (``git status``, a ``view``) so its trajectories resemble an agent's, and ends with ``submit``;
``explore=False`` leaves the looking out (edit, then submit: the shortest trajectories, for
tasks whose issue already states the edit, e.g. the synthetic ``guided`` tier). A hunk of one
removed and one added line with no context is replayed as the two lines' stripped text when
that text is unique in the file (the ``guided`` tier's issue quotes them stripped).
Used by tests, demos and as RFT warm-start data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from swe_gym.tasks import Task
from swe_gym.tools.parsing import ToolCall, format_action

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileDiff:
    path: str
    text: str  # the whole `diff --git` section
    new_file: bool = False
    deleted: bool = False
    hunks: list[list[str]] = field(default_factory=list)


def split_patch(patch: str) -> list[FileDiff]:
    """Split a unified git diff into per-file sections with their hunks' body lines."""
    files: list[FileDiff] = []
    for section in re.split(r"(?m)^(?=diff --git )", patch):
        if not section.startswith("diff --git "):
            continue
        header = section.splitlines()[0]
        path = header.split(" b/", 1)[1].strip()
        fd = FileDiff(path, section if section.endswith("\n") else section + "\n")
        fd.new_file = "\nnew file mode" in section or "\n--- /dev/null" in section
        fd.deleted = "\ndeleted file mode" in section or "\n+++ /dev/null" in section
        hunk: list[str] | None = None
        for line in section.splitlines()[1:]:
            if _HUNK.match(line):
                hunk = []
                fd.hunks.append(hunk)
            elif hunk is not None and line[:1] in (" ", "+", "-", "\\", ""):
                hunk.append(line)
        files.append(fd)
    return files


def _base_text(task: Task, path: str) -> str | None:
    """The file at base_commit when a local clone is at hand (to check str_replace uniqueness)."""
    try:
        import subprocess

        from swe_gym.repos import local_repo

        repo = local_repo(task.repo)
        out = subprocess.run(
            ["git", "-C", str(repo), "show", f"{task.base_commit}:{path}"],
            capture_output=True,
            timeout=30,
        )
        return out.stdout.decode("utf-8", "replace") if out.returncode == 0 else None
    except Exception:  # no clone here (e.g. a Docker-only task): skip the uniqueness check
        return None


def _git_apply(fd: FileDiff) -> ToolCall:
    marker = "SWE_GYM_PATCH_EOF"
    return ToolCall("bash", {"command": f"git apply <<'{marker}'\n{fd.text}{marker}"})


def _one_line(hunk: list[str], base: str | None) -> tuple[str, str] | None:
    """``(old, new)`` stripped, for a context-free one-line hunk whose old text is unique."""
    if len(hunk) != 2 or hunk[0][:1] != "-" or hunk[1][:1] != "+" or base is None:
        return None
    old, new = hunk[0][1:].strip(), hunk[1][1:].strip()
    return (old, new) if old and base.count(old) == 1 else None


def oracle_calls(task: Task, explore: bool = True) -> list[ToolCall]:
    """The oracle's tool calls; ``explore=False``: only the edits and ``submit``."""
    calls: list[ToolCall] = []
    if explore:
        calls.append(ToolCall("bash", {"command": "git status --short && ls"}))
    for fd in split_patch(task.patch):
        if fd.deleted:
            calls.append(ToolCall("bash", {"command": f"rm {fd.path}"}))
            continue
        if fd.new_file:
            body = [h[1:] for hunk in fd.hunks for h in hunk if h.startswith("+")]
            if any(h.startswith("\\") for hunk in fd.hunks for h in hunk):
                calls.append(_git_apply(fd))
            else:
                calls.append(
                    ToolCall(
                        "str_replace_editor",
                        {"command": "create", "path": fd.path, "file_text": "\n".join(body)},
                    )
                )
            continue
        if explore:
            calls.append(ToolCall("str_replace_editor", {"command": "view", "path": fd.path}))
        base = _base_text(task, fd.path)
        edits: list[ToolCall] = []
        for hunk in fd.hunks:
            old = [h[1:] for h in hunk if h[:1] in (" ", "-", "")]
            new = [h[1:] for h in hunk if h[:1] in (" ", "+", "")]
            old_s, new_s = _one_line(hunk, base) or ("\n".join(old), "\n".join(new))
            ambiguous = not old_s.strip() or any(h.startswith("\\") for h in hunk)
            if base is not None and not ambiguous:
                ambiguous = base.count(old_s) != 1
            if ambiguous:
                edits = [_git_apply(fd)]
                break
            edits.append(
                ToolCall(
                    "str_replace_editor",
                    {"command": "str_replace", "path": fd.path, "old_str": old_s, "new_str": new_s},
                )
            )
        calls.extend(edits)
    if explore:
        calls.append(ToolCall("bash", {"command": "git diff --stat"}))
    calls.append(ToolCall("submit"))
    return calls


def oracle_actions(task: Task, action_format: str = "fenced", explore: bool = True) -> list[str]:
    """The oracle's replies as raw text, each with a line of reasoning before the command."""
    out = []
    for call in oracle_calls(task, explore):
        what = (
            call.args.get("command", call.tool) if call.tool == "str_replace_editor" else call.tool
        )
        out.append(f"Next step ({what}).\n{format_action(call, action_format)}")
    return out
