"""Git objects a sandbox may see: only those reachable from ``base_commit``.

A task's cached repository holds the commits *after* ``base_commit`` too (the fix among them).
An ``alternates`` file pointing at its objects directory would let the agent read them with
``git cat-file --batch-all-objects`` or ``git fsck --lost-found``. So each (repository,
``base_commit``) gets its own pack, built once with ``git pack-objects --revs`` from the base
commit and the annotated tags reachable from it, kept in the toolkit cache
(``$SWE_GYM_CACHE/packs/<owner>__<name>/<sha>/``) and shared read-only by every sandbox of
that base. When an ancestor base is already packed, the new pack holds only what that one
lacks and the sandbox gets both (a chain of at most ``MAX_CHAIN`` packs): tasks of one
repository then share its history on disk. Concurrent builders take a file lock; the pack is built in a temp dir and renamed
into place, so a reader never sees half a pack.

A clone may lack objects outside the base tree (a historical commit or blob lost or never
fetched): only the base commit's tree is needed. When the full walk fails, the pack holds the
history that can still be read from the base (the last ``--max-count`` that walks), or else the
base commit and its tree alone, and the sandbox's repository is shallow at its boundary
(``.git/shallow``): ``git log`` ends there instead of failing. A missing object *in* the base
tree is an error naming it.

Host git only ever runs here over the cached repository (never over a directory the agent
can write), with system and global config ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swe_gym.errors import SandboxError
from swe_gym.paths import cache_root
from swe_gym.repos import repo_dir_name

GIT_TIMEOUT = 600.0  # a first pack of a large history takes a while
_SHA = re.compile(r"[0-9a-f]{40}")
# git as run by the host: no system/global config, hooks or fsmonitor of anyone.
CLEAN_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "HOME": "/nonexistent",
    "GIT_TERMINAL_PROMPT": "0",
}


def git_env(**extra: str) -> dict[str, str]:
    """A clean environment for host git (PATH kept so git is found)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", **CLEAN_GIT_ENV, **extra}


def host_git(
    *args: str, cwd: Path | str, env: dict[str, str] | None = None, input: bytes | None = None
) -> bytes:
    """Run git on the host over a directory the agent cannot write; SandboxError on failure."""
    cmd = ["git", "-c", "safe.directory=*", "-c", "core.fsmonitor=false", *args]
    try:
        p = subprocess.run(
            cmd,
            cwd=cwd,
            env=env or git_env(),
            input=input,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise SandboxError(f"`git {' '.join(args)}` timed out after {GIT_TIMEOUT:g} s") from e
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip()
        raise SandboxError(f"`git {' '.join(args)}` failed in {cwd}: {msg}")
    return p.stdout


@dataclass(frozen=True)
class BasePack:
    """The objects of one base commit: ``chain`` are git objects directories (``pack/``),
    this base's own first, then those of the ancestor bases its pack was built against."""

    sha: str
    chain: tuple[Path, ...]
    packed_refs: bytes  # the tags reachable from the base, in packed-refs format (may be empty)
    shallow: bytes = b""  # commits whose parents the clone lacks (history cut there)

    @property
    def objects(self) -> Path:
        return self.chain[0]


MAX_CHAIN = 8  # packs per base at most: each adds a lookup, a bind and an alternates line


def packs_root() -> Path:
    return cache_root() / "packs"


def _ready(d: Path) -> BasePack | None:
    objects = d / "objects"
    if not ((d / "done").is_file() and any((objects / "pack").glob("pack-*.pack"))):
        return None
    chain: tuple[Path, ...] = (objects,)
    parent = (d / "parent").read_text().strip() if (d / "parent").is_file() else ""
    if parent:
        up = _ready(d.parent / parent)
        if up is None:  # an ancestor pack was removed by hand: rebuild this one
            return None
        chain += up.chain
    shallow = (d / "shallow").read_bytes() if (d / "shallow").is_file() else b""
    return BasePack(d.name, chain, (d / "packed-refs").read_bytes(), shallow)


def base_pack(repo_name: str, repo: Path | None, base_commit: str) -> BasePack:
    """The objects reachable from ``base_commit`` (packed on first use).

    A pack is built against the nearest base already packed that is an ancestor of this one
    (``git pack-objects --revs <base> ^<ancestor>``), so many tasks of one repository share
    their history instead of each holding all of it. ``repo`` may be None when
    ``base_commit`` is a full sha whose pack is already cached."""
    root = packs_root() / repo_dir_name(repo_name)
    if _SHA.fullmatch(base_commit) and (hit := _ready(root / base_commit)):
        return hit
    if repo is None:
        raise SandboxError(f"no repository to build the objects of {base_commit!r} from")
    try:
        sha = host_git("rev-parse", "--verify", "-q", f"{base_commit}^{{commit}}", cwd=repo)
    except SandboxError:
        raise SandboxError(
            f"base_commit {base_commit!r} is not in the repository {repo} (for {repo_name!r}); "
            "fetch it there first"
        ) from None
    sha_s = sha.decode().strip()
    dest = root / sha_s
    if hit := _ready(dest):
        return hit
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{sha_s}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per base; the others wait, then reuse
        if hit := _ready(dest):
            return hit
        tmp = Path(tempfile.mkdtemp(prefix=f".{sha_s}.", dir=root))
        try:
            _build(repo, sha_s, tmp, _nearest_packed_ancestor(repo, root, sha_s))
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(dest)  # a half-built leftover of a killed builder
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    hit = _ready(dest)
    assert hit is not None
    return hit


def _nearest_packed_ancestor(repo: Path, root: Path, sha: str) -> BasePack | None:
    best: tuple[int, BasePack] | None = None
    for d in root.iterdir():
        if not _SHA.fullmatch(d.name) or d.name == sha or (pack := _ready(d)) is None:
            continue
        if len(pack.chain) >= MAX_CHAIN:
            continue
        try:
            host_git("merge-base", "--is-ancestor", d.name, sha, cwd=repo)
        except SandboxError:
            continue  # not an ancestor (or not in this clone)
        gap = int(host_git("rev-list", "--count", f"{d.name}..{sha}", cwd=repo))
        if best is None or gap < best[0]:
            best = (gap, pack)
    return best[1] if best else None


def _build(repo: Path, sha: str, out: Path, parent: BasePack | None) -> None:
    (out / "objects" / "pack").mkdir(parents=True)
    (out / "objects" / "info").mkdir()
    try:
        tags = host_git(
            "for-each-ref", f"--merged={sha}", "--format=%(objectname) %(refname)",
            "refs/tags", cwd=repo,
        )  # fmt: skip
        tag_objects = [line.split()[0] for line in tags.decode().splitlines() if line.strip()]
        revs = [sha, *tag_objects] + ([f"^{parent.sha}"] if parent else [])
        host_git(
            "pack-objects", "--revs", "-q", str(out / "objects" / "pack" / "pack"),
            cwd=repo, input=("\n".join(revs) + "\n").encode(),
        )  # fmt: skip
    except SandboxError:  # an object of the history is missing: keep what the base needs
        for p in (out / "objects" / "pack").iterdir():
            p.unlink()
        tags, parent = b"", None
        (out / "shallow").write_bytes(_pack_readable(repo, sha, out / "objects" / "pack" / "pack"))
    (out / "packed-refs").write_bytes(tags)  # no "peeled" header: git peels tags itself
    (out / "parent").write_text(parent.sha if parent else "")
    for p in out.rglob("*"):  # readable by every sandbox uid, writable by none
        p.chmod(0o755 if p.is_dir() else 0o444)
    out.chmod(0o755)
    (out / "done").write_text(sha + "\n")


def tree_blobs(repo: Path | str, sha: str) -> list[tuple[str, str]]:
    """(path, object id) of every entry of ``sha``'s tree, recursively (``git ls-tree -r``).
    SandboxError when git cannot read the tree."""
    out = host_git("ls-tree", "-r", "-z", sha, cwd=repo).decode("utf-8", "surrogateescape")
    entries = [e.split("\t", 1) for e in out.split("\0") if "\t" in e]
    return [(path, meta.split()[2]) for meta, path in entries]


def _missing_files(repo: Path, sha: str) -> list[str]:
    """Paths of ``sha``'s tree whose blobs the clone lacks (best effort: [] when unreadable)."""
    try:
        blobs = tree_blobs(repo, sha)
        ids = "".join(f"{oid}\n" for _, oid in blobs).encode()
        check = host_git("cat-file", "--batch-check", cwd=repo, input=ids)
    except (SandboxError, IndexError):
        return []
    return [
        path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # for a message
        for (path, _), line in zip(blobs, check.splitlines(), strict=False)
        if line.endswith(b" missing")
    ]


def _pack_readable(repo: Path, sha: str, pack: Path) -> bytes:
    """Pack the longest history below ``sha`` that reads whole (down to the base alone);
    returns the shallow commits. SandboxError naming the object when the base's own tree is
    incomplete."""
    for depth in (1000, 100, 10, 0):
        try:
            if depth:
                commits = host_git("rev-list", f"--max-count={depth}", sha, cwd=repo).split()
            else:
                commits = [sha.encode()]
            objects = host_git(
                "rev-list", "--objects", "--no-walk", "--stdin", cwd=repo,
                input=b"\n".join(commits) + b"\n",
            )  # fmt: skip
            host_git("pack-objects", "-q", str(pack), cwd=repo, input=objects)
        except SandboxError as e:
            for p in pack.parent.iterdir():
                p.unlink()
            if depth == 0:
                missing = _missing_files(repo, sha)
                named = f" (missing: {', '.join(missing[:5])})" if missing else ""
                raise SandboxError(
                    f"the clone {repo} lacks files of commit {sha}{named}: its tree is "
                    f"incomplete (a partial or size-capped copy?): {e}"
                ) from None
            continue
        have, shallow = set(commits), []
        for c in commits:  # cat-file reads the commit alone (rev-list would read its parents)
            body = host_git("cat-file", "commit", c.decode(), cwd=repo).split(b"\n\n", 1)[0]
            parents = [x.split()[1] for x in body.split(b"\n") if x.startswith(b"parent ")]
            if any(p not in have for p in parents):
                shallow.append(c)
        return b"".join(c + b"\n" for c in shallow)
    raise AssertionError("unreachable")


def init_repo(
    git_dir: Path, pack: BasePack, *, index: bool = False, work_tree: Path | None = None
) -> None:
    """A git dir whose objects come from ``pack`` (alternates), ``HEAD`` detached at the base
    and the reachable tags; with ``work_tree``, check the base out there (``read-tree -u``)."""
    (git_dir / "objects" / "info").mkdir(parents=True)
    (git_dir / "objects" / "pack").mkdir()
    (git_dir / "refs" / "heads").mkdir(parents=True)
    (git_dir / "refs" / "tags").mkdir()
    (git_dir / "objects" / "info" / "alternates").write_text("".join(f"{d}\n" for d in pack.chain))
    (git_dir / "HEAD").write_text(pack.sha + "\n")
    if pack.packed_refs:
        (git_dir / "packed-refs").write_bytes(pack.packed_refs)
    if pack.shallow:  # history cut where the clone lacks objects: git log stops there
        (git_dir / "shallow").write_bytes(pack.shallow)
    if work_tree is not None or index:
        env = git_env(GIT_DIR=str(git_dir))
        args = ["read-tree", "--reset", pack.sha]
        if work_tree is not None:
            env["GIT_WORK_TREE"] = str(work_tree)
            args.insert(1, "-u")
        host_git(*args, cwd=work_tree or git_dir, env=env)


__all__ = [
    "BasePack", "base_pack", "git_env", "host_git", "init_repo", "packs_root", "tree_blobs",
]  # fmt: skip
