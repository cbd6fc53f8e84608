"""Git plumbing on a local clone for curation: commits, merge bases, diffs, files."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT = 300.0


class GitError(RuntimeError):
    pass


def git(repo: Path, *args: str, check: bool = True) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT)
    if check and proc.returncode != 0:
        raise GitError(
            f"git {' '.join(args[:4])}: {proc.stderr.decode(errors='replace').strip()[:300]}"
        )
    return proc.stdout


def has_commit(repo: Path, sha: str) -> bool:
    if not sha:
        return False
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"],
        capture_output=True,
        timeout=GIT_TIMEOUT,
    )
    return proc.returncode == 0


def parents(repo: Path, sha: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", sha).decode().split()[1:]


def merge_base(repo: Path, a: str, b: str) -> str | None:
    out = git(repo, "merge-base", a, b, check=False).decode().strip()
    return out or None


@dataclass
class PRChange:
    """Where a PR's change sits in the clone: ``diff base..tip`` is the PR's cumulative patch."""

    base: str  # the merge base: files are read here (the task's base_commit)
    tip: str  # the PR's last commit (head) or its squash/merge commit
    how: str  # which commits were found: head | merge-commit-parents | squash


def locate_change(repo: Path, base_sha: str, head_sha: str, merge_sha: str) -> PRChange | str:
    """Find the PR's change, or return why it cannot be found.

    The cumulative patch is ``git diff base...head`` (what GitHub shows for the PR: from the
    merge base of the target branch and the head). If the head commit is not in the clone
    (squash merges; forks), use the merge commit: with two parents, ``merge^1...merge^2`` is
    the same diff; with one parent (squash or rebase), ``merge^1..merge`` - for a rebase of
    several commits this holds only the last one, a known limit of clones without PR refs.
    """
    if head_sha and base_sha and has_commit(repo, head_sha) and has_commit(repo, base_sha):
        mb = merge_base(repo, base_sha, head_sha)
        if mb:
            return PRChange(mb, head_sha, "head")
    if merge_sha and has_commit(repo, merge_sha):
        ps = parents(repo, merge_sha)
        if len(ps) == 2:
            mb = merge_base(repo, ps[0], ps[1])
            if mb:
                return PRChange(mb, ps[1], "merge-commit-parents")
        if len(ps) == 1:
            return PRChange(ps[0], merge_sha, "squash")
        return f"merge commit {merge_sha[:12]} has {len(ps)} parents"
    missing = [
        n
        for n, s in (("base", base_sha), ("head", head_sha), ("merge", merge_sha))
        if s and not has_commit(repo, s)
    ]
    if not (base_sha or head_sha or merge_sha):
        return "the events carry no base/head/merge commit"
    return "commits not in the clone: " + ", ".join(missing or ["(no usable pair)"])


@dataclass
class FileStat:
    path: str
    added: int | None  # None: binary
    deleted: int | None

    @property
    def binary(self) -> bool:
        return self.added is None


def numstat(repo: Path, base: str, tip: str) -> list[FileStat]:
    out = git(repo, "diff", "--numstat", "-z", "--no-renames", base, tip)
    stats = []
    for rec in out.decode("utf-8", "surrogateescape").split("\0"):
        if not rec:
            continue
        added, deleted, path = rec.split("\t", 2)
        stats.append(
            FileStat(
                path, None if added == "-" else int(added), None if deleted == "-" else int(deleted)
            )
        )
    return stats


def diff(repo: Path, base: str, tip: str, paths: list[str]) -> bytes:
    """``git diff --binary`` of ``paths`` (binary files as git binary patches, so ``git apply``
    can recreate them; renames as delete + add)."""
    if not paths:
        return b""
    return git(
        repo,
        "diff",
        "--binary",
        "--no-color",
        "--no-ext-diff",
        "--no-renames",
        "--full-index",
        base,
        tip,
        "--",
        *paths,
    )


def show(repo: Path, sha: str, path: str) -> bytes | None:
    proc = subprocess.run(
        ["git", "-C", str(repo), "show", f"{sha}:{path}"], capture_output=True, timeout=GIT_TIMEOUT
    )
    return proc.stdout if proc.returncode == 0 else None


def commit_time(repo: Path, sha: str) -> str:
    return git(repo, "show", "-s", "--format=%cI", sha).decode().strip()
