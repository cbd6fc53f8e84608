"""The derived repository: the source's HEAD plus one commit per accepted bug.

Each buggy commit holds the source tree with one mutated file. It is a *root* commit (no
parent) with a neutral message: with the clean HEAD as its parent, ``git show HEAD`` in the
sandbox would print the mutation, i.e. the answer. Author, committer and dates are fixed (the
source HEAD's date), so re-running gives the same hashes and a resumed run reuses its commits.
The repository is bare and lives at ``<repos_dir>/<owner>__<name>``, where
``swe_gym.repos.local_repo`` (and so every sandbox) finds it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from swe_gym.repos import repo_dir_name

_GIT_TIMEOUT = 300.0


def git(
    *args: str, cwd: Path, input: bytes | None = None, env: dict[str, str] | None = None
) -> str:
    """Run git on the host; raise RuntimeError with git's message (never a silent failure)."""
    cmd = [
        "git",
        "-c",
        "safe.directory=*",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
        *args,
    ]
    p = subprocess.run(
        cmd,
        cwd=cwd,
        input=input,
        capture_output=True,
        timeout=_GIT_TIMEOUT,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if p.returncode != 0:
        raise RuntimeError(
            f"`git {' '.join(args)}` failed in {cwd}: {p.stderr.decode('utf-8', 'replace').strip()}"
        )
    return p.stdout.decode("utf-8", "surrogateescape")


def source_head(source: Path) -> str:
    """The commit the bugs are made from (uncommitted changes are ignored)."""
    return git("rev-parse", "--verify", "HEAD^{commit}", cwd=source).strip()


def read_tree_files(source: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """Text of ``paths`` at ``commit`` (files that are not UTF-8 are left out)."""
    out: dict[str, str] = {}
    if not paths:
        return out
    raw = subprocess.run(
        ["git", "-c", "safe.directory=*", "cat-file", "--batch"],
        cwd=source,
        input="".join(f"{commit}:{p}\n" for p in paths).encode(),
        capture_output=True,
        timeout=_GIT_TIMEOUT,
        check=True,
    ).stdout
    pos = 0
    for path in paths:
        nl = raw.index(b"\n", pos)
        header = raw[pos:nl].split()
        pos = nl + 1
        if len(header) < 3 or header[1] != b"blob":
            continue
        size = int(header[2])
        data, pos = raw[pos : pos + size], pos + size + 1
        try:
            out[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return out


def list_files(source: Path, commit: str) -> list[str]:
    return git("ls-tree", "-r", "--name-only", "-z", commit, cwd=source).split("\0")[:-1]


class DerivedRepo:
    """A bare repository for task rows whose ``repo`` is ``name`` (e.g. ``synth/textkit``)."""

    def __init__(self, repos_dir: Path, name: str):
        self.name = name
        self.path = Path(repos_dir).expanduser().resolve() / repo_dir_name(name)

    def import_head(self, source: Path) -> str:
        """Fetch the source's HEAD into the derived repository; returns its hash."""
        head = source_head(source)
        if not (self.path / "HEAD").is_file():
            self.path.mkdir(parents=True, exist_ok=True)
            git("init", "-q", "--bare", "--template=", str(self.path), cwd=self.path.parent)
        have = (
            subprocess.run(
                ["git", "-c", "safe.directory=*", "cat-file", "-e", f"{head}^{{commit}}"],
                cwd=self.path,
                capture_output=True,
            ).returncode
            == 0
        )
        if not have:
            git(
                "fetch",
                "-q",
                "--no-tags",
                str(Path(source).resolve()),
                f"{head}:refs/synth/source",
                cwd=self.path,
            )
        git("update-ref", "refs/synth/source", head, cwd=self.path)
        git("symbolic-ref", "HEAD", "refs/synth/source", cwd=self.path)
        self._date = git("show", "-s", "--format=%cI", head, cwd=self.path).strip()
        return head

    def commit_bug(self, head: str, path: str, text: str, key: str) -> str:
        """A root commit holding ``head``'s tree with ``path`` replaced by ``text``."""
        blob = git(
            "hash-object", "-w", "--stdin", cwd=self.path, input=text.encode("utf-8")
        ).strip()
        mode = git("ls-tree", head, "--", path, cwd=self.path).split(" ", 1)[0] or "100644"
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git("read-tree", head, cwd=self.path, env=env)
            git(
                "update-index",
                "--add",
                "--cacheinfo",
                f"{mode},{blob},{path}",
                cwd=self.path,
                env=env,
            )
            tree = git("write-tree", cwd=self.path, env=env).strip()
        ident = {
            "GIT_AUTHOR_NAME": "swe_gym",
            "GIT_AUTHOR_EMAIL": "synth@swe-gym.invalid",
            "GIT_COMMITTER_NAME": "swe_gym",
            "GIT_COMMITTER_EMAIL": "synth@swe-gym.invalid",
            "GIT_AUTHOR_DATE": self._date,
            "GIT_COMMITTER_DATE": self._date,
        }
        sha = git(
            "commit-tree", tree, "-m", "Import source snapshot", cwd=self.path, env=ident
        ).strip()
        git("update-ref", f"refs/synth/bugs/{key}", sha, cwd=self.path)  # keeps it from gc
        return sha

    def patch(self, old: str, new: str, context: int = 3) -> str:
        """Unified git diff from ``old`` to ``new`` (the gold patch when old is buggy, new clean)
        with ``context`` lines around each change."""
        return git(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            f"-U{context}",
            old,
            new,
            cwd=self.path,
        )


__all__ = ["DerivedRepo", "list_files", "read_tree_files", "source_head"]
