"""Putting a patch into a grading sandbox: checked paths, ``git apply`` only, bytes kept.

The model patch is the agent's text. Before it reaches ``git apply`` its header paths are read
the way git reads them (C-quoted names unquoted, octal escapes included) and the patch is
refused when one of them has a ``.git`` component in any letter case, is absolute, or climbs
with ``..`` (``unsafe_path``). Then ``git apply`` alone applies it: no ``--reject``, no
``patch --fuzz``, which would write hunks git refuses (``.git/config``) or guess at context.
git itself refuses paths beyond a symbolic link. A patch made by this toolkit's diff always
applies this way; one that needs fuzz is refused with git's message in the report.

Patches are text with undecodable bytes kept as surrogate escapes (``Sandbox.diff``); they are
written back as the same bytes, so files with non-UTF-8 names or contents grade.
"""

from __future__ import annotations

import re
import shlex

from swe_gym.grading.testinfra import WORK_DIR, reset_to_base
from swe_gym.sandbox import Sandbox

_HEADER = re.compile(r"^(?:diff --git |--- |\+\+\+ |rename (?:from|to) |copy (?:from|to) )(.*)$")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def unquote(text: str) -> str:
    """A path as git wrote it, C-quoted or not, as text (undecodable bytes surrogate-escaped)."""
    text = text.strip()
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text
    out, i, body = bytearray(), 0, text[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                digits = re.match(r"[0-7]{1,3}", body[i + 1 :]).group(0)  # type: ignore[union-attr]
                out.append(int(digits, 8) & 0xFF)
                i += 1 + len(digits)
                continue
            out.append(_ESCAPES.get(nxt, ord(nxt) if ord(nxt) < 128 else 63))
            i += 2
            continue
        out += c.encode("utf-8", "surrogateescape")
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _header_paths(value: str) -> list[str]:
    """Every path a header line may name. ``diff --git a/x b/y`` with unquoted spaces is
    ambiguous, so each of its words counts as well."""
    value = value.split("\t", 1)[0] if not value.startswith('"') else value
    quoted = re.findall(r'"(?:[^"\\]|\\.)*"', value)
    if quoted:
        return [unquote(q) for q in quoted]
    return [value.strip(), *value.split()]


def unsafe_path(patch: str) -> str | None:
    """Why ``patch`` may not be applied (a header path into ``.git``, absolute, or with
    ``..``), naming the path; None when every path is plain."""
    in_header = True  # hunk lines ("--- x" is a removed "-- x") are content, not headers
    for line in patch.split("\n"):
        if line.startswith("diff --git "):
            in_header = True
        elif line.startswith("@@"):
            in_header = False
        m = _HEADER.match(line) if in_header else None
        for path in _header_paths(m.group(1)) if m else []:
            if path in ("/dev/null", ""):
                continue
            parts = path.split("/")
            if parts[0] in ("a", "b") and len(parts) > 1:
                parts = parts[1:]
            if path.startswith("/") and not path.startswith(("a/", "b/")):
                return f"the patch names an absolute path: {path!r}"
            for part in parts:
                if part.rstrip(". ").lower() == ".git" or part.lower().startswith(".git/"):
                    return f"the patch touches a .git path: {path!r}"
                if part == "..":
                    return f"the patch climbs out of the tree: {path!r}"
    return None


FALLBACKS = (
    ("git apply --reject", "git apply --verbose --reject {rel}"),
    ("patch --fuzz=5", "patch --batch --fuzz=5 -p1 -i {rel}"),
)


def apply_patch(
    sandbox: Sandbox,
    patch: str,
    name: str = "model",
    base_commit: str | None = None,
    strict: bool = True,
) -> tuple[str | None, str]:
    """Apply ``patch`` in the sandbox's workdir. Returns (method, log): method is
    ``"git apply"``, ``"empty"``, a fallback's name, or None when refused. ``strict`` (the
    model patch): ``git apply`` alone. Otherwise (the task's own test patch, trusted data)
    the SWE-bench harness's fallbacks follow. A failed try is undone before the next: the
    patch's own files put back to ``base_commit`` when given, else the whole tree reset."""
    if not patch.strip():
        return "empty", ""
    if not patch.endswith("\n"):
        patch += "\n"
    rel = f"{WORK_DIR}/{name}.diff"
    sandbox.write_file(rel, patch.encode("utf-8", "surrogateescape"))
    logs = []
    tries = (("git apply", "git apply --verbose {rel}"),) + (() if strict else FALLBACKS)
    for method, template in tries:
        cmd = template.format(rel=rel)
        res = sandbox.run(f"cd {shlex.quote(sandbox.workdir)} && {cmd}", timeout=120)
        logs.append(f"$ {cmd}\n{res.output}")
        if res.exit_code == 0:
            return method, "\n".join(logs)
        if base_commit is None:
            sandbox.run(
                f"cd {shlex.quote(sandbox.workdir)} && git checkout -q -- . && git clean -fdq -e {WORK_DIR}",
                timeout=60,
            )
        else:
            reset_to_base(sandbox, base_commit, patch_paths(patch))
    return None, "\n".join(logs)


def patch_paths(patch: str) -> list[str]:
    from swe_gym.tasks import patch_files

    files = patch_files(patch)
    return files + [f + suffix for f in files for suffix in (".rej", ".orig")]
