"""What a local (bubblewrap) sandbox sees: an allow list, never the host's tree.

Read-only: ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` links (or directories), a minimal
``/etc`` (a cached copy of ``ETC_ALLOW``: users and groups, the loader's cache, certificates,
alternatives, time zone, name-service and locale files; no secrets such as ``shadow`` or
``ssl/private``, no host tool configuration such as ``gitconfig`` or ``pip.conf``), the Python
interpreter's prefixes (``sys.prefix``, ``sys.base_prefix``), ``$PYENV_ROOT`` and the other
directories on ``PATH`` (with a task environment: only its venv and its interpreter's prefix),
and the objects of the task's base commit. Writable: ``/testbed`` (the
working copy) and size-capped tmpfs at ``/tmp`` and ``/dev/shm``. Everything else, the root
included, is a read-only tmpfs.

Nothing of the project may show through a bound prefix: the checkout of this toolkit, its
installed packages (a non-editable install in site-packages holds the starter tasks and their
fixes), the toolkit cache and the repositories directory are masked with an empty read-only
tmpfs wherever they fall inside something bound.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from swe_gym.paths import cache_root
from swe_gym.repos import REPOS_ENV

SANDBOX_WORKDIR = "/testbed"
ETC_ALLOW = (
    "passwd", "group", "nsswitch.conf", "host.conf", "hosts", "gai.conf", "networks",
    "protocols", "services", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl",
    "ca-certificates", "ca-certificates.conf", "pki", "alternatives", "localtime", "timezone",
    "locale.alias", "locale.conf", "mime.types", "magic", "magic.mime", "terminfo", "inputrc",
    "os-release", "lsb-release", "debian_version", "redhat-release", "alpine-release", "shells",
    "fonts", "perl", "xml", "python3", "python3.*", "resolv.conf",
)  # fmt: skip
ETC_MASK = ("ssl/private",)  # private keys (root-only on the host, but never needed)
_TOP_RUNTIME = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_PROJECT_PACKAGES = ("swe_gym", "envs", "agents", "algos")


def project_paths(repos_dir: str | os.PathLike | None = None) -> list[str]:
    """Host paths that must never show inside a sandbox: the toolkit's source checkout (or its
    installed packages), the toolkit cache and the repositories directories."""
    out = {str(cache_root())}
    here = Path(__file__).resolve().parents[2]  # the directory holding the swe_gym package
    if (here / "pyproject.toml").is_file() or (here / ".git").exists():
        out.add(str(here))  # a source checkout (editable install or run from it)
    for name in _PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name) if name == "swe_gym" else _sibling_spec(name, here)
        for loc in (spec.submodule_search_locations or []) if spec else []:
            out.add(os.path.realpath(loc))
    for d in (repos_dir, os.environ.get(REPOS_ENV)):
        if d:
            out.add(os.path.realpath(os.path.expanduser(str(d))))
    return sorted(out)


def _sibling_spec(name: str, here: Path):  # noqa: ANN202 - a ModuleSpec or None
    """The spec of a top-level package of this project installed next to swe_gym (never a
    same-named package from elsewhere)."""
    if not (here / name / "__init__.py").is_file():
        return None
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def prepared_etc() -> str:
    """The sandbox's ``/etc`` (see ``_prepared_etc``), rebuilt if it went missing."""
    path = _prepared_etc(str(cache_root()))
    if not os.path.isdir(path):
        _prepared_etc.cache_clear()
        path = _prepared_etc(str(cache_root()))
    return path


@functools.cache
def _prepared_etc(cache: str) -> str:
    """A copy of the allowed ``/etc`` entries, bound as the sandbox's ``/etc`` in one mount
    (one bind per entry made each sandbox start tens of milliseconds slower). Kept in the
    toolkit cache under a hash of the entries' paths, sizes and times, so a changed host
    ``/etc`` gets a new copy; computed once per process."""
    entries = sorted({p for pat in ETC_ALLOW for p in glob.glob(os.path.join("/etc", pat))})
    stamp = []
    for top in entries:
        walk = [(top, [], [])] if not os.path.isdir(top) else os.walk(top)
        for d, _, files in walk:
            for p in [d, *(os.path.join(d, f) for f in files)]:
                with contextlib.suppress(OSError):
                    st = os.lstat(p)
                    stamp.append((p, st.st_size, st.st_mtime_ns, st.st_mode))
    key = hashlib.sha256(repr(stamp).encode()).hexdigest()[:16]
    dest = Path(cache) / "etc" / key
    if (dest / "done").is_file():
        return str(dest / "etc")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".etc.", dir=dest.parent))
    try:
        etc = tmp / "etc"
        etc.mkdir(mode=0o755)
        for top in entries:
            name = os.path.relpath(top, "/etc")
            if os.path.isdir(top) and not os.path.islink(top):
                shutil.copytree(
                    top,
                    etc / name,
                    symlinks=True,
                    ignore=_skip_private,
                    ignore_dangling_symlinks=True,
                )
            else:  # a link into the runtime stays a link (/etc/localtime names the zone)
                real = os.path.realpath(top)
                keep_link = os.path.islink(top) and _inside(real, "/usr")
                shutil.copy2(top, etc / name, follow_symlinks=not keep_link)
        for d, dirs, files in os.walk(tmp):  # readable by any sandbox uid
            for n in dirs + files:
                p = os.path.join(d, n)
                if not os.path.islink(p):
                    os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)
        os.chmod(tmp, 0o755)
        (tmp / "done").write_text(key + "\n")
        try:
            os.rename(tmp, dest)
        except OSError:  # another process made it first
            if not (dest / "done").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(dest / "etc")


def _skip_private(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if os.path.join(directory, n) in _ETC_MASK_PATHS]


_ETC_MASK_PATHS = {os.path.join("/etc", m) for m in ETC_MASK}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def toolchain_dirs() -> list[str]:
    """Directories to bind read-only besides the runtime: Python's prefixes, ``$PYENV_ROOT``
    (its shims need the versions) and each other ``PATH`` directory by itself (never its
    parent: ``~/.cargo/bin`` is bound, ``~/.cargo`` with its credentials is not)."""
    found: set[str] = set()
    prefixes = {sys.prefix, sys.base_prefix, os.environ.get("PYENV_ROOT", "")}
    pyenv = os.environ.get("PYENV_ROOT") or ""
    for p in os.environ.get("PATH", "").split(os.pathsep):
        if p.endswith("/.pyenv/shims") or p.endswith("/.pyenv/bin"):
            pyenv = pyenv or os.path.dirname(p)
        found.add(p)
    prefixes.add(pyenv)
    found |= prefixes
    out = set()
    for p in found:
        if not p or not os.path.isabs(p) or not os.path.isdir(p):
            continue
        for cand in {os.path.normpath(p), os.path.realpath(p)}:
            top = cand.split("/")[1] if cand != "/" else ""
            if cand == "/" or top in _TOP_RUNTIME or top == "etc":
                continue  # bound anyway, or never (/etc is an allow list)
            out.add(cand)
    # Never a directory holding the sandboxes' temp dirs or whole home folders (PATH=/tmp or
    # PATH=~ would show other sandboxes, caches, credentials); nor one inside another.
    temps = [tempfile.gettempdir(), os.environ.get("SWE_GYM_SANDBOX_TMP") or ""]
    out = {
        d
        for d in out
        if d not in ("/home", "/root") and not any(t and _inside(t, d) for t in temps)
    }
    return sorted(d for d in out if not any(o != d and _inside(d, o) for o in out))


def _parent_dirs(path: str, made: set[str]) -> list[str]:
    """``--dir`` options (mode 0755) for ancestors bwrap would otherwise make 0700 on the
    sandbox's tmpfs root, so that the unprivileged sandbox user can traverse them."""
    parts = Path(path).parts[1:-1]
    out: list[str] = []
    for i in range(1, len(parts) + 1):
        sub = "/" + "/".join(parts[:i])
        if sub not in made:
            made.add(sub)
            out += ["--perms", "0755", "--dir", sub]
    return out


def bwrap_mounts(
    *,
    workdir_host: str,
    readonly_worktree: bool = False,
    objects: list[str],
    extra_binds: list[tuple[str, str, bool]] = (),  # type: ignore[assignment]
    identity: tuple[str, str] | None = None,
    tmp_size_mb: int = 512,
    shm_size_mb: int = 64,
    repos_dir: str | os.PathLike | None = None,
    toolchain: list[str] | None = None,
    env_binds: list[tuple[str, bool]] = (),  # type: ignore[assignment]
    hide: list[str] = (),  # type: ignore[assignment]
) -> list[str]:
    """bwrap options building the sandbox's file system (see the module docstring).

    ``toolchain``: the directories bound for the interpreter (default ``toolchain_dirs()``,
    the host's; a task environment passes its own venv and interpreter prefix instead, so the
    host's site-packages and plugins stay out of sight). ``env_binds``: (host dir, writable)
    bound at their host paths after the project masks (a task environment lives in the
    toolkit cache, which is masked). ``hide``: directories inside bound ones masked with an
    empty read-only tmpfs (a task environment's interpreter's own site-packages).

    ``objects``: git objects directories bound read-only at their host paths (the alternates
    of the working copy). ``extra_binds``: (host, sandbox, writable) for private paths such as
    the diff's git dir. ``identity``: (passwd, group) files replacing ``/etc``'s."""
    args: list[str] = []
    made: set[str] = {"/tmp", "/tmp/home", "/var", "/dev", "/sys", "/proc"}
    # First the private tmpfs: toolchains bound later may live under /tmp on the host.
    args += [
        "--dev", "/dev",
        "--perms", "01777", "--size", str(shm_size_mb << 20), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",  # its tmpfs is the caller's in a user namespace: no cap on it
        "--proc", "/proc",
        "--perms", "0755", "--dir", "/sys",
        "--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu",
        "--perms", "01777", "--size", str(tmp_size_mb << 20), "--tmpfs", "/tmp",
        "--perms", "0777", "--dir", "/tmp/home",
        "--perms", "0755", "--dir", "/var",
        "--symlink", "../tmp", "/var/tmp",
    ]  # fmt: skip
    for top in _TOP_RUNTIME:
        path = "/" + top
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", prepared_etc(), "/etc"]
    if identity is not None:
        args += ["--ro-bind", identity[0], "/etc/passwd", "--ro-bind", identity[1], "/etc/group"]
    masks: list[str] = []
    bound = ["/usr", "/etc"]
    for d in toolchain_dirs() if toolchain is None else toolchain:
        args += [*_parent_dirs(d, made), "--ro-bind", d, d]
        bound.append(d)
    bound += [os.path.realpath(p) for p in ("/bin", "/sbin", "/lib", "/lib64") if os.path.isdir(p)]
    for proj in project_paths(repos_dir):
        if any(_inside(proj, b) for b in bound) and os.path.isdir(proj):
            masks.append(proj)
    masks += [d for d in hide if os.path.isdir(d) and d not in masks]
    for m in masks:
        args += ["--tmpfs", m]
    for obj in objects:
        args += [*_parent_dirs(obj, made), "--ro-bind", obj, obj]
    for d, writable in env_binds:
        args += [*_parent_dirs(d, made), "--bind" if writable else "--ro-bind", d, d]
    for m in masks:
        args += ["--remount-ro", m]
    args += ["--ro-bind" if readonly_worktree else "--bind", workdir_host, SANDBOX_WORKDIR]
    for host, inside, writable in extra_binds:
        args += [*_parent_dirs(inside, made), "--bind" if writable else "--ro-bind", host, inside]
    return [*args, "--remount-ro", "/"]


__all__ = ["ETC_ALLOW", "SANDBOX_WORKDIR", "bwrap_mounts", "project_paths", "toolchain_dirs"]
