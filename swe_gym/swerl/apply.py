"""Apply SEARCH/REPLACE edits and unified diffs to in-memory files, and write git patches.

Pure functions over ``dict[path, content]``: the reward needs no checkout, and the same code
serves the env (similarity and execution rewards) and curation.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from swe_gym.swerl.format import FormatError, SearchReplaceEdit


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping the ends (``str.splitlines`` also splits on ``\\x0c``,
    ``\\u2028``... which would corrupt a patch)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _apply_one(content: str, edit: SearchReplaceEdit, index: int) -> str:
    where = f"block {index + 1} on {edit.path}"
    if edit.search == "":
        if content == "":
            return edit.replace + "\n" if edit.replace else ""
        raise FormatError("search_ambiguous", f"{where}: an empty SEARCH matches everywhere")
    # Whole-line matching: pad so the first and last line of the file are anchored the same way
    # as the others, and SEARCH "x = 1" cannot match the line "x = 10".
    tail_added = not content.endswith("\n")
    padded = "\n" + content + ("\n" if tail_added else "")
    needle = "\n" + edit.search + "\n"
    first = padded.find(needle)
    if first < 0:
        raise FormatError("search_not_found", where)
    # A SEARCH that occurs twice is an error rather than "replace all" (the SWE-RL reference
    # code's str.replace) or "replace the first": the model did not say which place it meant,
    # replacing every copy edits code it may never have looked at, and picking one silently
    # rewards a guess. Overlapping occurrences count too (find from first + 1).
    if padded.find(needle, first + 1) >= 0:
        raise FormatError("search_ambiguous", f"{where}: SEARCH occurs more than once")
    repl = "\n" + edit.replace + "\n" if edit.replace else "\n"
    padded = padded[:first] + repl + padded[first + len(needle) :]
    out = padded[1:]
    if tail_added:
        out = out[:-1] if out.endswith("\n") else out
    return out


def apply_edits(files: Mapping[str, str], edits: Iterable[SearchReplaceEdit]) -> dict[str, str]:
    """New content of every file the edits touch, applied in order (a later block sees the
    earlier ones' result). Raises ``FormatError``: ``unknown_file``, ``search_not_found``,
    ``search_ambiguous``. Creating new files is not supported (the path must be in ``files``)."""
    new: dict[str, str] = {}
    for i, edit in enumerate(edits):
        if edit.path not in files:
            known = ", ".join(sorted(files)[:10])
            raise FormatError("unknown_file", f"block {i + 1}: {edit.path!r}; known: {known}")
        current = new.get(edit.path, files[edit.path])
        new[edit.path] = _apply_one(current, edit, i)
    return new


# ---------------------------------------------------------------- unified diffs (git format)


class PatchApplyError(ValueError):
    """A unified diff that does not apply to the given files."""


@dataclass
class Hunk:
    old_start: int
    lines: list[str] = field(default_factory=list)  # with their ' ', '-', '+' prefix, no EOL marker

    def old_new(self) -> tuple[list[str], list[str]]:
        old, new = [], []
        for line in self.lines:
            tag, body = line[0], line[1:]
            if tag in " -":
                old.append(body)
            if tag in " +":
                new.append(body)
        return old, new


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)
    binary: bool = False

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(p: str) -> str | None:
    p = p.split("\t")[0].strip()
    if p == "/dev/null":
        return None
    if p.startswith('"') and p.endswith('"'):
        p = p[1:-1]
    return p[2:] if p[:2] in ("a/", "b/") else p


def parse_patch(patch: str) -> list[FilePatch]:
    """Parse a git-style unified diff (several files). Binary sections are kept, flagged."""
    files: list[FilePatch] = []
    cur: FilePatch | None = None
    lines = split_lines(patch)
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        if line.startswith("diff --git "):
            parts = line[len("diff --git ") :].split(" b/", 1)
            a = _strip_prefix(parts[0])
            b = parts[1].strip() if len(parts) == 2 else a
            cur = FilePatch(a, b)
            files.append(cur)
        elif line.startswith("new file mode") and cur is not None:
            cur.old_path = None
        elif line.startswith("deleted file mode") and cur is not None:
            cur.new_path = None
        elif line.startswith(("Binary files ", "GIT binary patch")) and cur is not None:
            cur.binary = True
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_p = _strip_prefix(line[4:])
            new_p = _strip_prefix(lines[i + 1].rstrip("\n")[4:])
            if cur is None or cur.hunks:  # a plain (non-git) diff: one section per ---/+++ pair
                cur = FilePatch(old_p, new_p)
                files.append(cur)
            else:
                cur.old_path, cur.new_path = old_p, new_p
            i += 1
        elif (m := _HUNK_RE.match(line)) and cur is not None:
            n_old = int(m[2]) if m[2] is not None else 1
            n_new = int(m[4]) if m[4] is not None else 1
            hunk = Hunk(int(m[1]))
            i += 1
            while i < len(lines) and (n_old > 0 or n_new > 0 or lines[i].startswith("\\")):
                body = lines[i]
                if body.startswith("\\"):  # "\ No newline at end of file": drop the last EOL
                    if hunk.lines and hunk.lines[-1].endswith("\n"):
                        hunk.lines[-1] = hunk.lines[-1][:-1]
                    i += 1
                    continue
                tag = body[:1] if body[:1] in (" ", "-", "+") else " "
                if body in ("\n", ""):  # some tools strip the space of empty context lines
                    body = " " + body
                hunk.lines.append(body)
                n_old -= tag in " -"
                n_new -= tag in " +"
                i += 1
            cur.hunks.append(hunk)
            continue
        i += 1
    return files


def _apply_hunks(content: str, hunks: list[Hunk], path: str) -> str:
    lines = split_lines(content)
    offset = 0
    for h_i, hunk in enumerate(hunks):
        old, new = hunk.old_new()
        # '-5,0' (pure insertion) means after line 5; otherwise the hunk starts at line 5.
        want = hunk.old_start - 1 + offset if old else hunk.old_start + offset
        pos: int | None
        if not old:
            pos = min(max(want, 0), len(lines))
        else:
            pos = None
            # Exact position first, then the nearest match (git apply also tolerates offsets).
            for delta in range(0, len(lines) + 1):
                for cand in (want - delta, want + delta) if delta else (want,):
                    if 0 <= cand <= len(lines) - len(old) and lines[cand : cand + len(old)] == old:
                        pos = cand
                        break
                if pos is not None:
                    break
            if pos is None:
                raise PatchApplyError(
                    f"hunk {h_i + 1} of {path} (line {hunk.old_start}) does not apply"
                )
        lines[pos : pos + len(old)] = new
        offset += len(new) - len(old)
    return "".join(lines)


def apply_patch(files: Mapping[str, str], patch: str) -> dict[str, str | None]:
    """New content of every text file ``patch`` touches (``None``: deleted). Binary sections
    are skipped: they have no text to compare. Raises ``PatchApplyError``."""
    out: dict[str, str | None] = {}
    for fp in parse_patch(patch):
        if fp.binary:
            continue
        if fp.new_path is None:
            out[fp.old_path or ""] = None
            continue
        if fp.old_path is None:
            base = ""
        else:
            if fp.old_path not in files and fp.old_path not in out:
                raise PatchApplyError(f"the patch edits {fp.old_path!r}, which is not in the files")
            base = out.get(fp.old_path) or files.get(fp.old_path) or ""
        out[fp.new_path] = _apply_hunks(base, fp.hunks, fp.new_path)
    return out


def make_patch(old_files: Mapping[str, str], new_files: Mapping[str, str | None]) -> str:
    """A git-style unified diff (``a/``/``b/`` paths) from ``old_files`` to ``new_files``; files
    with identical content are left out. Applies with ``git apply``."""
    chunks: list[str] = []
    for path in sorted(new_files):
        old = old_files.get(path)
        new = new_files[path]
        if old == new:
            continue
        header = [f"diff --git a/{path} b/{path}\n"]
        if old is None:
            header.append("new file mode 100644\n")
        elif new is None:
            header.append("deleted file mode 100644\n")
        a = "/dev/null" if old is None else f"a/{path}"
        b = "/dev/null" if new is None else f"b/{path}"
        body = difflib.unified_diff(split_lines(old or ""), split_lines(new or ""), a, b, n=3)
        out = []
        for line in body:
            out.append(line)
            if not line.endswith("\n"):
                out.append("\n\\ No newline at end of file\n")
        chunks.append("".join(header + out))
    return "".join(chunks)


def edits_from_patch(files: Mapping[str, str], patch: str) -> list[SearchReplaceEdit]:
    """SEARCH/REPLACE edits that reproduce ``patch`` on ``files`` (one per hunk, widened to the
    whole file when a hunk's old lines are not unique): a scripted "oracle" answer for tests,
    demos and SFT data. Created, deleted and binary files are left out (SEARCH/REPLACE cannot
    express them)."""
    edits: list[SearchReplaceEdit] = []
    for fp in parse_patch(patch):
        if fp.binary or fp.old_path is None or fp.new_path is None or fp.old_path not in files:
            continue
        current = files[fp.old_path]
        for hunk in fp.hunks:
            old, new = hunk.old_new()
            search, replace = "".join(old).rstrip("\n"), "".join(new).rstrip("\n")
            edit = SearchReplaceEdit(fp.old_path, search, replace)
            try:
                if not search or search == replace:
                    raise FormatError("search_ambiguous")
                current = _apply_one(current, edit, 0)
            except FormatError:
                edits = [e for e in edits if e.path != fp.old_path]
                target = _apply_hunks(files[fp.old_path], fp.hunks, fp.old_path)
                edits.append(
                    SearchReplaceEdit(
                        fp.old_path, files[fp.old_path].rstrip("\n"), target.rstrip("\n")
                    )
                )
                break
            edits.append(edit)
    return edits
