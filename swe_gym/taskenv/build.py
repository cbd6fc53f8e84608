"""Building a task environment with uv, once per recipe key, shared by every process.

Layout (``$SWE_GYM_CACHE/envs/<key>/``): ``venv/`` (a uv venv of the chosen interpreter with
the seed packages and the recipe's packages, resolved with ``--exclude-newer`` at the recipe's
date: ``swe_gym.taskenv.seeds``), ``build-constraints.txt`` (the install step's build
dependencies as of that date), ``tree/``
(files the install step generated inside the working tree, e.g. an editable install's
``*.egg-info`` or setuptools-scm's ``_version.py``, copied into every fresh working copy),
``manifest.json`` (written last: its presence means the environment is complete) and
``build.log``. The venv is built at its final path (its scripts name it), under an exclusive
file lock; a directory without a manifest is a killed build's leftover and is rebuilt.

The install step (``pre_install`` then ``install``, e.g. ``pip install -e .``) runs once, at
the recipe's install commit (the row's base commit, as SWE-bench's harness runs it), in a
bubblewrap sandbox that shows the working copy at
``/testbed`` (where every task sandbox has it, so an editable install's paths hold there),
the venv writable and PyPI reachable; nothing else of the host. Commands of a system package
manager (``apt-get``, ``yum``, ``sudo``...) are skipped and listed in the manifest.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swe_gym.errors import SWEGymError
from swe_gym.paths import cache_root
from swe_gym.taskenv.pythons import choose, host_prefix
from swe_gym.taskenv.recipe import Recipe
from swe_gym.taskenv.seeds import build_constraints, install_seeds, seed_cut
from swe_gym.taskenv.uvtool import run_uv

INSTALL_TIMEOUT = 1800.0
MAX_TREE_BYTES = 256 * 2**20  # generated files copied into every working copy
_SYSTEM_PKG = ("apt-get", "apt ", "yum ", "dnf ", "apk ", "sudo ", "conda ")
_SKIP_GENERATED = ("__pycache__/", ".pytest_cache/", ".eggs/", "build/", ".tox/", ".git/")
VENV_PATH_TAIL = "/usr/local/bin:/usr/bin:/bin"


class EnvBuildError(SWEGymError):
    """The recipe could not be built; the message says which step and why."""


@dataclass(frozen=True)
class TaskEnv:
    """A built environment. ``binds``: host directories a sandbox must see read-only."""

    key: str
    root: Path
    manifest: dict[str, Any]
    built_now: bool = False  # this call built it (else it was in the cache)

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def binds(self) -> list[str]:
        return [str(self.root), self.manifest["interpreter_prefix"]]

    @property
    def generated(self) -> list[str]:
        return list(self.manifest.get("generated", []))

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    def base_site_packages(self) -> list[str]:
        """The interpreter's own site-packages (the host's packages; the venv never reads
        them), hidden in sandboxes."""
        prefix = self.manifest["interpreter_prefix"]
        return sorted(glob.glob(f"{prefix}/lib/python*/site-packages"))

    def path(self) -> str:
        return f"{self.venv}/bin:{VENV_PATH_TAIL}"


def envs_root() -> Path:
    return cache_root() / "envs"


def _progress(label: str, msg: str, t0: float) -> None:
    print(
        f"[swe_gym env {label}] {msg} ({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True
    )


def load(key: str) -> TaskEnv | None:
    root = envs_root() / key
    try:
        return TaskEnv(key, root, json.loads((root / "manifest.json").read_text()))
    except (OSError, ValueError):
        return None


def ensure(
    recipe: Recipe,
    *,
    label: str,
    allow_nearest: bool = False,
    install_runner=None,  # noqa: ANN001 - (recipe, commands, venv, log, constraints) -> checkout
) -> TaskEnv:
    """The environment of ``recipe``, built now unless the cache has it."""
    key = recipe.key
    if (hit := load(key)) is not None:
        return hit
    if recipe.unsupported:
        raise EnvBuildError(f"{label}: cannot build: " + "; ".join(recipe.unsupported))
    root = envs_root() / key
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(envs_root() / f"{key}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per key; the others wait, then reuse
        if (hit := load(key)) is not None:
            return hit
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(root)  # a killed build's leftover
        root.mkdir(mode=0o755)
        try:
            manifest = _build(recipe, root, label, allow_nearest, install_runner)
        except BaseException:
            with contextlib.suppress(OSError):  # kept for diagnosis; the next try rebuilds
                shutil.copyfile(root / "build.log", envs_root() / f"{key}.failed.log")
            shutil.rmtree(root, ignore_errors=True)
            raise
    return TaskEnv(key, root, manifest, built_now=True)


def _log(log: Path, line: str) -> None:
    with log.open("a") as f:
        f.write(line + "\n")


def _check(p: subprocess.CompletedProcess, what: str, log: Path) -> None:
    with log.open("a") as f:
        f.write(f"$ {what}\n{p.stdout}{p.stderr}\n")
    if p.returncode != 0:
        raise EnvBuildError(f"{what} failed: {(p.stderr or p.stdout)[-1500:]}")


def _build(recipe: Recipe, root: Path, label: str, allow_nearest: bool, runner) -> dict:  # noqa: ANN001
    t0 = time.monotonic()
    log = root / "build.log"
    interp, note = choose(recipe.python or "3.11", allow_nearest, what=f"{label}: ")
    _progress(
        label, f"python {interp.minor} from {interp.path}" + (f"; {note}" if note else ""), t0
    )
    venv = root / "venv"
    need_pip = bool(recipe.install or recipe.pre_install)
    args = ["venv", "-q", "--no-python-downloads", "--python", interp.path, str(venv)]
    _check(run_uv(*args), "uv " + " ".join(args), log)
    py = str(venv / "bin" / "python")
    # The seeds as of the row's date (uv's --seed would give today's), in every environment:
    # a SWE-bench environment has them, and old packages import pkg_resources at run time.
    cut, cut_note = seed_cut(recipe.exclude_newer, interp.minor)
    seeds = install_seeds(py, cut, recipe.seed, lambda p, what: _check(p, what, log))
    seed_line = " ".join(f"{k}=={v}" for k, v in seeds.items() if v)
    seed_line += f" (as of {cut})" if cut else " (no date: the newest)"
    if recipe.seed:
        seed_line += f"; overridden: {' '.join(recipe.seed)}"
    _log(log, f"seeds: {seed_line}" + (f"; {cut_note}" if cut_note else ""))
    _progress(label, f"seeds {seed_line}", t0)
    date = ["--exclude-newer", f"{recipe.exclude_newer}T23:59:59Z"] if recipe.exclude_newer else []
    reqs: list[str] = []
    skipped: list[str] = []
    for i, (path, text) in enumerate(sorted(recipe.requirements.items())):
        keep = []
        for line in text.splitlines():
            s = line.strip()
            if s.startswith(("-e", ".", "-r", "-c", "git+")) or "://" in s:
                skipped.append(f"{path}: {s}")  # the tree itself, nested files, URLs
            else:
                keep.append(line)
        f = root / f"requirements-{i}.txt"
        f.write_text("\n".join(keep) + "\n")
        reqs += ["-r", str(f)]
    if recipe.packages or reqs:
        _progress(
            label,
            f"installing {len(recipe.packages)} packages, {len(reqs) // 2} requirement files",
            t0,
        )
        args = ["pip", "install", "--python", str(venv / "bin" / "python")]
        p = run_uv(*args, *date, *recipe.packages, *reqs)
        if p.returncode != 0 and date and "exclude-newer" in p.stderr:
            # an exact pin newer than the date (swebench's specs pin some): the pins win
            dropped = f"--exclude-newer {recipe.exclude_newer} dropped: a pin is newer"
            note = f"{note}; {dropped}" if note else dropped
            _progress(label, dropped, t0)
            with log.open("a") as out:
                out.write(f"{p.stderr}\n{dropped}\n")
            p = run_uv(*args, *recipe.packages, *reqs)
        _check(p, "uv " + " ".join([*args, *recipe.packages, *reqs]), log)
    if recipe.extra_packages:  # named by an override: not subject to the date
        args = ["pip", "install", "--python", py, *recipe.extra_packages]
        _check(run_uv(*args), "uv " + " ".join(args), log)
    generated: list[str] = []
    constraints: list[str] = []
    if need_pip:
        if runner is None:
            raise EnvBuildError(
                f"{label}: the recipe has an install step and no clone to run it in"
            )
        cmds = [c for c in recipe.pre_install if not c.lstrip().startswith(_SYSTEM_PKG)]
        skipped += [f"pre_install: {c}" for c in recipe.pre_install if c not in cmds]
        cfile = None
        if recipe.build_constraints:
            cfile = root / "build-constraints.txt"
            constraints = build_constraints(py, cut, cfile)
            _log(log, "build constraints: " + " ".join(constraints))
        at = recipe.install_rev
        _progress(label, f"install step at {at[:12]}: {recipe.install}", t0)
        checkout = runner(recipe, cmds, venv, log, cfile)
        try:
            generated = _keep_generated(checkout, root / "tree")
        finally:
            shutil.rmtree(checkout.parent, ignore_errors=True)
    for d, dirs, files in os.walk(root):  # readable by every sandbox uid, writable by none
        for n in dirs + files:
            path = os.path.join(d, n)
            if not os.path.islink(path):
                os.chmod(
                    path,
                    os.stat(path).st_mode & 0o755 | 0o444 | (0o111 if os.path.isdir(path) else 0),
                )
    manifest = {
        "key": recipe.key,
        "source": recipe.source,
        "python": ".".join(map(str, interp.version)),
        "interpreter": interp.path,
        "interpreter_prefix": host_prefix(interp.path),
        "note": note,
        "packages": recipe.packages,
        "extra_packages": recipe.extra_packages,
        "install": recipe.install,
        "setup_commit": recipe.setup_commit,
        "install_commit": recipe.install_commit,
        "seeds": seeds,
        "seed_cut": cut,
        "build_constraints": constraints,
        "exclude_newer": recipe.exclude_newer,
        "generated": generated,
        "skipped": skipped,
        "build_s": round(time.monotonic() - t0, 2),
    }
    tmp = root / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.chmod(0o444)
    tmp.replace(root / "manifest.json")
    _progress(label, f"built {recipe.key}", t0)
    return manifest


def _keep_generated(checkout: Path, dest: Path) -> list[str]:
    """Copy what the install step made in the tree (untracked files, ignored ones included)."""
    from swe_gym.sandbox.objects import git_env, host_git

    env = git_env(GIT_DIR=str(checkout / ".git"), GIT_WORK_TREE=str(checkout))
    out = host_git("ls-files", "-z", "-o", cwd=checkout, env=env).decode("utf-8", "surrogateescape")
    keep, total = [], 0
    for rel in sorted(p for p in out.split("\0") if p):
        if rel.startswith(_SKIP_GENERATED) or "/__pycache__/" in rel or rel.endswith(".pyc"):
            continue
        src = checkout / rel
        total += src.lstat().st_size
        if total > MAX_TREE_BYTES:
            raise EnvBuildError(
                f"the install step generated more than {MAX_TREE_BYTES} bytes in the tree"
            )
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
        keep.append(rel)
    return keep


__all__ = ["EnvBuildError", "TaskEnv", "ensure", "envs_root", "load"]
