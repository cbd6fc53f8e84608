"""Deterministic building and caching of the SWEStarter git repositories.

Shared by the package API (``repo_path``) and the maintainer script (``build.py``); see
``build.py`` for the layout of the sources.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from swe_gym.paths import cache_root

PKG_DIR = Path(__file__).resolve().parent
REPOS_DIR = PKG_DIR / "repos"
TASKS_FILE = PKG_DIR / "tasks.jsonl"

OWNER = "starter"
DEFAULT_AUTHOR = "SWEStarter Maintainers <maintainers@swe-starter.invalid>"
COMMITTER = DEFAULT_AUTHOR
# How repository files are stored in this package (see stored_to_repo_path).
STORED_SUFFIX = ".txt"
DOT_PREFIX = "dot_"
GIT_TIMEOUT_S = 120


# ----------------------------------------------------------------------------------- git


def git_env() -> dict[str, str]:
    """An environment in which no user, system or caller git setting reaches git."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
        TZ="UTC",
    )
    return env


_GIT_OPTS = (
    "-c", "core.autocrlf=false",
    "-c", "core.eol=lf",
    "-c", "core.attributesFile=" + os.devnull,
    "-c", "core.hooksPath=" + os.devnull,
    "-c", "commit.gpgsign=false",
    "-c", "init.defaultBranch=main",
)  # fmt: skip


def git(
    *args: str, cwd: Path | None = None, input: bytes | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Run git with the isolated environment; raise with git's stderr on failure."""
    proc = subprocess.run(
        ["git", *_GIT_OPTS, *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        env=git_env(),
        timeout=GIT_TIMEOUT_S,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed (exit {proc.returncode}) in {cwd}: "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    return proc


# ------------------------------------------------------------------------------ history


@dataclass(frozen=True)
class Commit:
    dir: str
    message: str
    date: str
    author: str = DEFAULT_AUTHOR
    delete: tuple[str, ...] = ()
    hash: str = ""


def repo_names() -> list[str]:
    """Short names of the bundled repositories (``textkit``, ...), sorted."""
    return sorted(p.parent.name for p in REPOS_DIR.glob("*/history.json"))


def full_name(name: str) -> str:
    return f"{OWNER}/{name}"


def short_name(repo: str) -> str:
    """``starter/textkit`` -> ``textkit``; raises KeyError naming the accepted repos."""
    names = repo_names()
    short = repo.removeprefix(OWNER + "/")
    if repo != full_name(short) or short not in names:
        accepted = ", ".join(full_name(n) for n in names)
        raise KeyError(f"unknown starter repo {repo!r}; choose one of: {accepted}")
    return short


def history_path(name: str) -> Path:
    return REPOS_DIR / name / "history.json"


def load_history(name: str) -> list[Commit]:
    rows = json.loads(history_path(name).read_text(encoding="utf-8"))
    out = []
    for row in rows:
        out.append(
            Commit(
                dir=row["dir"],
                message=row["message"],
                date=row["date"],
                author=row.get("author", DEFAULT_AUTHOR),
                delete=tuple(row.get("delete", ())),
                hash=row.get("hash", ""),
            )
        )
    if not out:
        raise ValueError(f"{history_path(name)} lists no commits")
    return out


def expected_head(name: str) -> str:
    """The hash recorded for the repository's last commit (empty if never built)."""
    return load_history(name)[-1].hash


def snapshot_files(name: str, commit: Commit) -> dict[str, bytes]:
    """The files a snapshot folder adds or changes, by repository path."""
    root = REPOS_DIR / name / commit.dir
    if not root.is_dir():
        raise FileNotFoundError(
            f"snapshot folder {root} (named in {history_path(name)}) is missing"
        )
    files = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        files[stored_to_repo_path(path.relative_to(root).as_posix())] = path.read_bytes()
    return files


def stored_to_repo_path(stored: str) -> str:
    """``textkit/wrap.py.txt`` -> ``textkit/wrap.py``; ``dot_gitignore.txt`` -> ``.gitignore``.

    One trailing ``.txt`` is dropped and a ``dot_`` prefix becomes ``.``, so every source file
    is package data (``*.txt``, ``*.md``, ``*.json``; no dotfiles) and no ``.py`` file of a
    task repository is linted, imported or collected as part of this project.
    """
    parts = stored.split("/")
    parts[-1] = parts[-1].removesuffix(STORED_SUFFIX)
    return "/".join("." + p[len(DOT_PREFIX) :] if p.startswith(DOT_PREFIX) else p for p in parts)


def _git_time(iso: str) -> str:
    dt = datetime.fromisoformat(iso)
    if dt.tzinfo is None:
        raise ValueError(f"commit date {iso!r} needs a UTC offset (e.g. 2024-01-08T10:00:00+00:00)")
    offset = int(dt.utcoffset().total_seconds() // 60)  # type: ignore[union-attr]
    sign = "+" if offset >= 0 else "-"
    return f"{int(dt.timestamp())} {sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"


def fast_import_stream(name: str, history: list[Commit]) -> bytes:
    """The ``git fast-import`` stream of the whole history: one full snapshot per commit."""
    out = bytearray()

    def data(blob: bytes) -> None:
        out.extend(b"data %d\n" % len(blob))
        out.extend(blob)
        out.extend(b"\n")

    tree: dict[str, bytes] = {}
    for i, commit in enumerate(history, 1):
        tree.update(snapshot_files(name, commit))
        for path in commit.delete:
            if path not in tree:
                raise ValueError(
                    f"{name} commit {commit.dir} deletes {path!r}, which does not exist"
                )
            del tree[path]
        when = _git_time(commit.date)
        out.extend(b"commit refs/heads/main\nmark :%d\n" % i)
        out.extend(f"author {commit.author} {when}\n".encode())
        out.extend(f"committer {COMMITTER} {when}\n".encode())
        data(commit.message.rstrip("\n").encode() + b"\n")
        if i > 1:
            out.extend(b"from :%d\n" % (i - 1))
        out.extend(b"deleteall\n")
        for path in sorted(tree):
            out.extend(f"M 100644 inline {path}\n".encode())
            data(tree[path])
        out.extend(b"\n")
    return bytes(out)


def build_repo(name: str, dest: Path) -> list[str]:
    """Create the git repository ``dest`` (must not exist) for ``name``; return commit hashes."""
    history = load_history(name)
    dest.mkdir(parents=True)
    # --template= : no hooks or info/ files from the system template directory.
    git("init", "-q", "--template=", str(dest))
    git(
        "fast-import",
        "--quiet",
        "--done",
        cwd=dest,
        input=fast_import_stream(name, history) + b"done\n",
    )
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=dest)
    git("reset", "-q", "--hard", "main", cwd=dest)
    log = git("rev-list", "--reverse", "main", cwd=dest).stdout.decode().split()
    if len(log) != len(history):
        raise RuntimeError(f"{name}: built {len(log)} commits, history.json lists {len(history)}")
    return log


# ------------------------------------------------------------------------------- cache


def _head(path: Path) -> str | None:
    if not (path / ".git").is_dir():
        return None
    proc = git("rev-parse", "--verify", "-q", "refs/heads/main", cwd=path, check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def _has_commits(path: Path, commits: Iterable[str]) -> bool:
    wanted = [c for c in commits if c]
    if not wanted:
        return True
    proc = git(
        "cat-file",
        "--batch-check",
        cwd=path,
        input="".join(c + "^{commit}\n" for c in wanted).encode(),
        check=False,
    )
    return proc.returncode == 0 and b"missing" not in proc.stdout


def is_valid_cache(path: Path, name: str, head: str, base_commits: Iterable[str] = ()) -> bool:
    """True if ``path`` holds the repository with the expected head and base commits."""
    got = _head(path)
    if got is None or (head and got != head):
        return False
    return _has_commits(path, base_commits)


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_repo(name: str, base_commits: Iterable[str] = (), root: Path | None = None) -> Path:
    """Return the cached repository of ``name``, building it if missing or not as recorded.

    Concurrent callers are safe: builds happen in a temporary folder under the cache that is
    renamed into place, under an exclusive lock, and a stale or corrupt copy is moved aside first.
    """
    base_commits = list(base_commits)
    root = (root or cache_root()) / "repos"
    final = root / name
    head = expected_head(name)
    if is_valid_cache(final, name, head, base_commits):
        return final
    with _lock(root / f".{name}.lock"):
        if is_valid_cache(final, name, head, base_commits):  # another process built it meanwhile
            return final
        tmp = root / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            hashes = build_repo(name, tmp)
            if head and hashes[-1] != head:
                raise RuntimeError(
                    f"starter repo {name!r} built with head {hashes[-1]}, but history.json records "
                    f"{head}; run `python -m swe_gym.starter.build` after editing its sources"
                )
            if final.exists() or final.is_symlink():
                trash = root / f".trash-{name}-{uuid.uuid4().hex[:8]}"
                os.rename(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not is_valid_cache(final, name, head, base_commits):
        raise RuntimeError(f"starter repo {name!r} at {final} is not valid right after building it")
    return final


def read_tasks_file(path: Path = TASKS_FILE) -> list[dict]:
    """The rows of ``tasks.jsonl`` as dicts (empty if the file does not exist yet)."""
    if not path.exists():
        return []
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
