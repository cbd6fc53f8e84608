"""Docker images for tasks: resolve, pull, or build them locally in layers.

Resolution order for a task (``ensure_image``):

1. the row's own image field (``Task.image_name``, from ``docker_image`` / ``image_name``);
2. the published names: SWE-bench ``swebench/sweb.eval.x86_64.<id>`` and SWE-rebench
   ``swerebench/sweb.eval.x86_64.<id>`` (``__`` -> ``_1776_``, lowercased);
3. a local build, in layers like the SWE-bench harness:

   - **base** ``swe-gym/base:<suite>``: a Debian ``debootstrap --variant=minbase`` root with
     python3, pytest, pip, git and patch, imported with ``docker import``. The root tarball is
     cached (``$SWE_GYM_CACHE`` or ``~/.cache/swe_gym``) so a re-import takes
     seconds. The Debian mirror is read from this machine's apt sources, never hardcoded.
   - **environment** ``swe-gym/env:<hash>``: the base plus the environment part of the task's
     ``install_config`` (``python``, ``packages``, ``pip_packages``, ``env_vars``), keyed by a hash
     of that recipe so tasks that share a recipe share the image. A row whose recipe the host's
     interpreter does not meet (``swe_gym.taskenv``: another Python, a pin, an install step; the
     bundled suite never) gets ``swe-gym/env:task-<hash>`` instead: its task environment, built
     on the host, copied in with its interpreter (``swe_gym.taskenv.docker_layers``); its
     instance copies the install step's generated files rather than running it again.
   - **instance** ``swe-gym/testbed.<repo>:<hash>``: the environment plus the repository at
     ``base_commit`` in ``/testbed`` (history after ``base_commit`` is not in the image), then
     ``pre_install`` and ``install`` run there. Keyed by repository, commit and recipe, so
     tasks at the same commit share it.

Pull policies: ``never`` (local images only), ``if-missing`` (local first, then pull),
``always`` (pull first). Pulls retry with backoff on transient errors (timeouts, 429, 5xx);
permanent ones (unknown host, no such image, access denied) fail at once. Builds run with no
network unless ``build_network="host"`` (or ``$SWE_GYM_BUILD_NETWORK=host``) lets pip reach
PyPI; pip requirements the base already satisfies install offline (a no-op).

CLI::

    python -m swe_gym.images base [--suite bookworm] [--tag swe-gym/base:bookworm] [--rebuild]
    python -m swe_gym.images build [--tasks starter] [--ids ID ...] [--pull-policy if-missing]
    python -m swe_gym.images resolve [--tasks starter] [--ids ID ...]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swe_gym.errors import SandboxUnavailable, SWEGymError, unknown_choice
from swe_gym.paths import cache_root
from swe_gym.taskenv import docker_layers
from swe_gym.tasks import Task

log = logging.getLogger(__name__)

BASE_REPOSITORY = "swe-gym/base"
DEFAULT_SUITE = "bookworm"
# What every task image needs: the test runner, the patch tools, pip (for recipes), procps (ps,
# kill for timeouts), setuptools/wheel so `pip install -e .` works offline without build isolation.
BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-pytest",
    "python3-pip",
    "python3-setuptools",
    "python3-wheel",
    "git",
    "patch",
    "procps",
    "ca-certificates",
)
PULL_POLICIES = ("never", "if-missing", "always")
WORKDIR = "/testbed"
# Bumped when the layout of the generated Dockerfiles changes, so old cached images are not reused.
RECIPE_VERSION = 3
# Fields of install_config that shape the environment image (the rest need the repository).
ENV_FIELDS = ("python", "packages", "pip_packages", "env_vars", "env_yml_path", "reqs_path")
INSTANCE_FIELDS = ("pre_install", "install")
LABEL_OWNER = "swe-gym"

_build_slots = threading.BoundedSemaphore(int(os.environ.get("SWE_GYM_MAX_BUILDS", "2")))
# One lock per image tag: two threads that need the same image build it once.
_tag_locks: dict[str, threading.Lock] = {}
_tag_locks_guard = threading.Lock()
# Pull failures seen in this process (name -> message), so an offline machine pays once.
_pull_failures: dict[str, str] = {}
_resolved: dict[tuple[str, str], str] = {}


class ImageError(SandboxUnavailable):
    """An image could not be found, pulled or built. The message names the image."""


class BuildError(ImageError):
    """A local build failed; ``log_tail`` holds the last lines of the build log."""

    def __init__(self, tag: str, log_tail: str, reason: str = ""):
        self.tag = tag
        self.log_tail = log_tail
        super().__init__(
            f"building image {tag!r} failed{': ' + reason if reason else ''}\n"
            f"--- last lines of the build log ---\n{log_tail}"
        )


# --------------------------------------------------------------------------------------- names


def published_names(instance_id: str) -> list[str]:
    """SWE-bench and SWE-rebench image names for an instance id (``__`` -> ``_1776_``)."""
    key = instance_id.replace("__", "_1776_").lower()
    return [f"swebench/sweb.eval.x86_64.{key}", f"swerebench/sweb.eval.x86_64.{key}"]


def _slug(text: str, limit: int = 100) -> str:
    s = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.")
    return s[:limit] or "task"


def _hash(obj: Any, n: int = 12) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:n]


def cache_dir() -> Path:
    """The toolkit cache (``swe_gym.paths.cache_root``): ``$SWE_GYM_CACHE`` or ``~/.cache/swe_gym``."""
    return cache_root()


def base_tag(suite: str = DEFAULT_SUITE) -> str:
    return f"{BASE_REPOSITORY}:{suite}"


# --------------------------------------------------------------------------------- apt sources


def apt_mirror(suite: str = DEFAULT_SUITE, sources_dir: str | os.PathLike = "/etc/apt") -> str:
    """The Debian mirror URI this machine's apt sources use for ``suite`` (or any Debian one)."""
    root = Path(sources_dir)
    entries: list[tuple[list[str], list[str]]] = []  # (uris, suites)
    files = [root / "sources.list"] + sorted((root / "sources.list.d").glob("*"))
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for para in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in para.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
                if (
                    "deb" in fields.get("types", "").split()
                    and fields.get("enabled", "yes") != "no"
                ):
                    entries.append(
                        (fields.get("uris", "").split(), fields.get("suites", "").split())
                    )
        elif f.suffix == ".list":
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 3 and parts[0] == "deb":
                    parts = [p for p in parts if not p.startswith("[")] if "[" in line else parts
                    entries.append(([parts[1]], [parts[2]]))
    for uris, suites in entries:
        if suite in suites and uris:
            return uris[0]
    for uris, _ in entries:  # another suite, but a Debian archive: debootstrap only needs the pool
        for uri in uris:
            if uri.rstrip("/").endswith("/debian"):
                return uri
    raise ImageError(
        f"no Debian mirror for suite {suite!r} in {root}/sources.list(.d); add one, or import a "
        f"root filesystem yourself: tar -C DIR -c . | docker import - {base_tag(suite)}"
    )


# ---------------------------------------------------------------------------------- base image


def _image_exists(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base(
    client: Any = None,
    *,
    suite: str = DEFAULT_SUITE,
    tag: str | None = None,
    packages: Sequence[str] = BASE_PACKAGES,
    rebuild: bool = False,
    mirror: str | None = None,
) -> str:
    """Make the base image (debootstrap -> cached tarball -> ``docker import``); returns its tag."""
    from swe_gym.docker_daemon import get_client

    client = client or get_client()
    tag = tag or base_tag(suite)
    with _tag_lock(tag):
        if not rebuild and _image_exists(client, tag):
            return tag
        cache = cache_dir() / "images"
        cache.mkdir(parents=True, exist_ok=True)
        tarball = cache / f"base-{suite}-{_hash(sorted(packages), 10)}.tar"
        if rebuild or not tarball.exists():
            _debootstrap(suite, packages, mirror or apt_mirror(suite), tarball)
        log.info("importing %s as %s", tarball, tag)
        repo, _, ver = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        client.api.import_image_from_file(
            str(tarball),
            repository=repo,
            tag=ver,
            changes=[
                "ENV LANG=C.UTF-8",
                "ENV PIP_BREAK_SYSTEM_PACKAGES=1",  # Debian marks its python externally managed
                "ENV PIP_DISABLE_PIP_VERSION_CHECK=1",
                "ENV PYTHONDONTWRITEBYTECODE=1",
                f"LABEL owner={LABEL_OWNER} swe-gym.layer=base swe-gym.suite={suite}",
                'CMD ["/bin/bash"]',
            ],
        )
        if not _image_exists(client, tag):
            raise ImageError(f"docker import of {tarball} did not produce {tag!r}")
        return tag


def _debootstrap(suite: str, packages: Sequence[str], mirror: str, tarball: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap not found; install it (Debian: apt-get install debootstrap)")
    work = Path(tempfile.mkdtemp(prefix="base-", dir=tarball.parent))
    rootfs = work / "rootfs"
    log_path = work / "debootstrap.log"
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        suite,
        str(rootfs),
        mirror,
    ]
    log.info("running %s (about a minute)", " ".join(cmd))
    try:
        with log_path.open("wb") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=1800).returncode
        if rc != 0:
            raise BuildError(
                base_tag(suite),
                _tail(log_path.read_text(errors="replace")),
                f"debootstrap exit {rc}",
            )
        # Package caches are dead weight in every image built from this one.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / sub).glob("*"):
                if p.is_file():
                    p.unlink()
        part = tarball.with_suffix(".part")
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(part), "."],
            check=True,
            timeout=600,
        )
        part.replace(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------------- recipes


@dataclass(frozen=True)
class Recipe:
    """The local build recipe for one task: the environment part and the instance part."""

    env: dict[str, Any]
    instance: dict[str, Any]
    base: str

    @property
    def env_tag(self) -> str:
        return f"swe-gym/env:{_hash({'v': RECIPE_VERSION, 'base': self.base, 'env': self.env})}"


def recipe_for(task: Task, base: str | None = None) -> Recipe:
    cfg = dict(task.install_config or {})
    env = {k: cfg[k] for k in ENV_FIELDS if cfg.get(k) not in (None, "", [], {})}
    inst = {k: cfg[k] for k in INSTANCE_FIELDS if cfg.get(k) not in (None, "", [], {})}
    return Recipe(env=env, instance=inst, base=base or base_tag())


def _as_commands(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value if str(v).strip()]


def _pip_step(requirements: list[str]) -> str:
    """Offline first (satisfied requirements are a no-op), then with the index if the build has
    network; a missing package fails the build with pip's own message in the log tail."""
    args = " ".join(_shell_quote(r) for r in requirements)
    return (
        f"python3 -m pip install --no-index --no-build-isolation {args} "
        f"|| python3 -m pip install {args}"
    )


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _env_dockerfile(recipe: Recipe) -> str:
    env = recipe.env
    lines = [
        f"FROM {recipe.base}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        # SWE-bench images and test commands say `python`; Debian's base only has `python3`.
        "RUN command -v python >/dev/null || ln -s /usr/bin/python3 /usr/local/bin/python",
    ]
    py = str(env.get("python", "")).strip()
    if py:
        # The base has Debian's python3; a recipe that asks for another one is recorded and
        # checked loudly rather than silently ignored (no conda without network here).
        lines.append(
            f"RUN have=$(python3 -c 'import sys;print(\"%d.%d\"%sys.version_info[:2])'); "
            f'if [ "$have" != {_shell_quote(py)} ]; then echo "note: recipe asks for python '
            f'{py}, the image has $have"; fi'
        )
    for k, v in (env.get("env_vars") or {}).items():
        lines.append(f"ENV {k}={json.dumps(str(v))}")
    pkgs = env.get("packages")
    if (
        isinstance(pkgs, str)
        and pkgs.strip()
        and pkgs.strip() not in ("requirements.txt", "environment.yml")
    ):
        lines.append(f"RUN {_pip_step(pkgs.split())}")
    elif isinstance(pkgs, list) and pkgs:
        lines.append(f"RUN {_pip_step([str(p) for p in pkgs])}")
    pip = env.get("pip_packages")
    if pip:
        lines.append(
            f"RUN {_pip_step(pip.split() if isinstance(pip, str) else [str(p) for p in pip])}"
        )
    lines.append(f"LABEL owner={LABEL_OWNER} swe-gym.layer=env")
    return "\n".join(lines) + "\n"


def _instance_dockerfile(env_tag: str, recipe: Recipe, task: Task) -> str:
    inst = recipe.instance
    lines = [
        f"FROM {env_tag}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"COPY testbed {WORKDIR}",
        f"WORKDIR {WORKDIR}",
        # git refuses to work in a repository owned by another uid without this.
        f"RUN git config --system --add safe.directory '*' && git config --system user.email "
        f"agent@swe-gym.invalid && git config --system user.name swe-gym && git -C {WORKDIR} status --short | head -5",
    ]
    pkgs = recipe.env.get("packages")
    reqs = recipe.env.get("reqs_path")
    if pkgs == "requirements.txt" and reqs:
        for r in _as_commands(reqs):
            lines.append(f"RUN {_pip_step(['-r', r])}")
    for cmd in _as_commands(inst.get("pre_install")):
        lines.append(f"RUN {cmd}")
    for cmd in _as_commands(inst.get("install")):
        lines.append(f"RUN {cmd}")
    lines.append(
        f"LABEL owner={LABEL_OWNER} swe-gym.layer=instance swe-gym.repo={_slug(task.repo)} "
        f"swe-gym.base_commit={task.base_commit}"
    )
    return "\n".join(lines) + "\n"


def instance_tag(task: Task, recipe: Recipe | None = None, taskenv_key: str | None = None) -> str:
    recipe = recipe or recipe_for(task)
    key = {
        "v": RECIPE_VERSION,
        "env": recipe.env_tag,
        "inst": recipe.instance,
        "repo": task.repo,
        "commit": task.base_commit,
    }
    if taskenv_key:  # the task environment's image (swe_gym.taskenv.docker_layers.env_tag)
        key["taskenv"] = taskenv_key
    # Keyed by repository, commit and recipe (not instance id): tasks sharing them share the image.
    return f"swe-gym/testbed.{_slug(task.repo.replace('/', '.'))}:{_hash(key)}"


# -------------------------------------------------------------------------------------- builds


def _tag_lock(tag: str) -> threading.Lock:
    with _tag_locks_guard:
        return _tag_locks.setdefault(tag, threading.Lock())


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _docker_build(
    client: Any,
    tag: str,
    dockerfile: str,
    files: Mapping[str, Path] | None,
    network: str,
    skip: Any = None,  # (member name) -> True to leave it out of the context
) -> None:
    """``docker build`` from an in-memory context (the legacy builder; no BuildKit here)."""
    import docker.errors

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        keep = None if skip is None else (lambda m: None if skip(m.name) else m)
        for name, path in (files or {}).items():
            tar.add(str(path), arcname=name, filter=keep)
    buf.seek(0)
    lines: list[str] = []
    with _build_slots:
        try:
            stream = client.api.build(
                fileobj=buf,
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                decode=True,
                network_mode=network,
                labels={"owner": LABEL_OWNER},
            )
            for chunk in stream:
                if "stream" in chunk:
                    lines.extend(chunk["stream"].rstrip("\n").splitlines())
                if "error" in chunk:
                    lines.append(chunk["error"].rstrip())
                    raise BuildError(
                        tag, _tail("\n".join(lines)), chunk["error"].strip().splitlines()[0]
                    )
        except docker.errors.APIError as e:
            lines.append(str(e))
            raise BuildError(tag, _tail("\n".join(lines)), str(e)) from None
    if not _image_exists(client, tag):
        raise BuildError(tag, _tail("\n".join(lines)), "the build ended without an image")


def _testbed_context(task: Task, dest: Path, repos_dir: str | os.PathLike | None = None) -> Path:
    """A clone of the task's repository at ``base_commit`` with no later history (no branches,
    no later tags, no reflog), so the agent cannot ``git log`` its way to the fix."""
    from swe_gym.repos import local_repo

    src = Path(local_repo(task.repo, repos_dir))
    out = dest / "testbed"

    def git(*args: str, cwd: Path | None = None) -> str:
        r = subprocess.run(
            ["git", "-c", "advice.detachedHead=false", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            raise ImageError(
                f"git {' '.join(args)} failed for {task.instance_id}: {r.stderr.strip()[-2000:]}"
            )
        return r.stdout

    git("clone", "--quiet", "--no-checkout", "--no-hardlinks", str(src), str(out))
    git("checkout", "--quiet", "--detach", task.base_commit, cwd=out)
    refs = git("for-each-ref", "--format=%(refname)", cwd=out).split()
    for ref in refs:
        if ref.startswith("refs/tags/"):  # tags at or before base_commit are history, not future
            keep = subprocess.run(
                ["git", "merge-base", "--is-ancestor", f"{ref}^{{commit}}", task.base_commit],
                cwd=out,
                capture_output=True,
                timeout=60,
            )
            if keep.returncode == 0:
                continue
        git("update-ref", "-d", ref, cwd=out)
    git("remote", "remove", "origin", cwd=out)
    git("reflog", "expire", "--expire=now", "--all", cwd=out)
    git("gc", "--quiet", "--prune=now", cwd=out)
    return out


def build_instance(
    task: Task,
    client: Any = None,
    *,
    build_network: str | None = None,
    base: str | None = None,
    rebuild: bool = False,
    repos_dir: str | os.PathLike | None = None,
) -> str:
    """Build (or reuse) the environment and instance images for ``task``; returns the tag.
    The repository comes from ``swe_gym.repos.local_repo(task.repo, repos_dir)``."""
    from swe_gym.docker_daemon import get_client

    client = client or get_client()
    network = build_network or os.environ.get("SWE_GYM_BUILD_NETWORK", "none")
    base = base or base_tag()
    if not _image_exists(client, base):
        if base == base_tag():
            build_base(client)
        else:
            raise ImageError(
                f"base image {base!r} not found; build it with: python -m swe_gym.images base --tag {base}"
            )
    recipe = recipe_for(task, base)
    tenv = _task_env(task, repos_dir)
    if tenv is not None:  # the row's own Python and packages, built on the host, copied in
        env_tag = docker_layers.env_tag(tenv, base, LABEL_OWNER)
        with _tag_lock(env_tag):
            if rebuild or not _image_exists(client, env_tag):
                log.info("building task environment image %s", env_tag)
                dockerfile, files = docker_layers.env_dockerfile(tenv, base, LABEL_OWNER)
                _docker_build(
                    client, env_tag, dockerfile, files, network, skip=docker_layers.skip_in_context
                )
        recipe = Recipe(env={}, instance=docker_layers.without_install(recipe.instance), base=base)
    else:
        env_tag = recipe.env_tag
        with _tag_lock(env_tag):
            if rebuild or not _image_exists(client, env_tag):
                log.info("building environment image %s", env_tag)
                _docker_build(client, env_tag, _env_dockerfile(recipe), None, network)
    tag = instance_tag(task, recipe, env_tag if tenv else None)
    with _tag_lock(tag):
        if rebuild or not _image_exists(client, tag):
            log.info("building instance image %s for %s", tag, task.instance_id)
            with tempfile.TemporaryDirectory(prefix="swe-gym-ctx-") as tmp:
                testbed = _testbed_context(task, Path(tmp), repos_dir)
                if tenv is not None:
                    docker_layers.prepare_testbed(tenv, testbed)
                _docker_build(
                    client,
                    tag,
                    _instance_dockerfile(env_tag, recipe, task),
                    {"testbed": testbed},
                    network,
                )
    return tag


def _task_env(task: Task, repos_dir: str | os.PathLike | None):  # noqa: ANN202
    """The task environment the image is built on (``swe_gym.taskenv``'s "auto" rule), or
    None for the Debian-Python layered build (the bundled suite, rows the host meets)."""
    from swe_gym import taskenv

    if taskenv.uses_host(task, taskenv.task_recipe(task, repos_dir), "auto"):
        return None
    return taskenv.resolve(task, "auto", repos_dir)


def _taskenv_key(task: Task, repos_dir: str | os.PathLike | None) -> str | None:
    """The env image tag ``build_instance`` would use, when its environment is already built
    (None otherwise: then the build finds or makes it)."""
    from swe_gym import taskenv
    from swe_gym.taskenv.build import load

    recipe = taskenv.task_recipe(task, repos_dir)
    if taskenv.uses_host(task, recipe, "auto") or (env := load(recipe.key)) is None:
        return None
    return docker_layers.env_tag(env, base_tag(), LABEL_OWNER)


# ---------------------------------------------------------------------------------------- pulls


_PERMANENT = (
    "no such host",
    "not found",
    "manifest unknown",
    "pull access denied",
    "repository does not exist",
    "unauthorized",
    "invalid reference format",
)


def _is_transient(exc: BaseException) -> bool:
    import docker.errors
    import requests

    if isinstance(exc, (requests.exceptions.Timeout, requests.exceptions.ConnectionError)):
        return True
    if isinstance(exc, docker.errors.APIError):
        text = str(exc).lower()
        if any(p in text for p in _PERMANENT):
            return False
        code = exc.status_code or 0
        return code == 429 or code >= 500 or "timeout" in text or "too many requests" in text
    return False


def pull(client: Any, name: str, *, attempts: int = 4, max_wait: float = 8.0) -> None:
    """Pull ``name`` with retries and exponential backoff on transient errors."""
    from tenacity import (
        RetryError,
        Retrying,
        retry_if_exception,
        stop_after_attempt,
        wait_exponential,
    )

    repo, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    try:
        for attempt in Retrying(
            retry=retry_if_exception(_is_transient),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.5, max=max_wait),
            reraise=False,
        ):
            with attempt:
                client.images.pull(repo, tag=tag)
    except RetryError as e:
        last = e.last_attempt.exception()
        raise ImageError(
            f"pulling image {name!r} failed after {attempts} attempts: {last}"
        ) from None
    except Exception as e:  # a permanent error: no retries
        raise ImageError(f"pulling image {name!r} failed: {e}") from None


# ----------------------------------------------------------------------------------- resolution


def candidates(task: Task) -> list[str]:
    """Names tried for ``task`` before a local build, in order."""
    names = [task.image_name] if task.image_name else []
    pub = published_names(task.instance_id)
    if task.install_config:  # a SWE-rebench row: its own namespace first
        pub.reverse()
    return [n for n in names + pub if n]


def ensure_image(
    task: Task | None = None,
    *,
    image: str | None = None,
    pull_policy: str = "if-missing",
    build: bool = True,
    client: Any = None,
    build_network: str | None = None,
    repos_dir: str | os.PathLike | None = None,
) -> str:
    """Return the name of a local image for ``task`` (or exactly ``image``), pulling or building.

    With an explicit ``image`` only that name is tried (no build). ``build=False`` stops after the
    pull candidates. Raises ``ImageError`` naming every image tried and why it was not usable.
    """
    from swe_gym.docker_daemon import get_client

    if pull_policy not in PULL_POLICIES:
        raise unknown_choice("pull_policy", pull_policy, PULL_POLICIES)
    if image is None and task is None:
        raise ValueError("ensure_image needs a task or an image name")
    client = client or get_client()
    key = (image or task.instance_id, pull_policy)  # type: ignore[union-attr]
    cached = _resolved.get(key)
    if cached and pull_policy != "always" and _image_exists(client, cached):
        return cached

    names = [image] if image else candidates(task)  # type: ignore[arg-type]
    tried: list[str] = []
    if pull_policy != "always":
        for n in names:
            if _image_exists(client, n):
                _resolved[key] = n
                return n
        if image is None and build:
            local = instance_tag(task, taskenv_key=_taskenv_key(task, repos_dir))  # type: ignore[arg-type]
            if _image_exists(client, local):
                _resolved[key] = local
                return local
    if pull_policy == "never":
        tried = [f"{n} (not present locally; pull_policy='never')" for n in names]
    else:
        for n in names:
            if n in _pull_failures and pull_policy != "always":
                tried.append(f"{n} ({_pull_failures[n]})")
                continue
            try:
                pull(client, n)
                _resolved[key] = n
                return n
            except ImageError as e:
                _pull_failures[n] = str(e)
                tried.append(f"{n} ({e})")
    if image is None and build:
        tag = build_instance(task, client, build_network=build_network, repos_dir=repos_dir)  # type: ignore[arg-type]
        _resolved[key] = tag
        return tag
    raise ImageError(
        "no usable image"
        + (f" for task {task.instance_id!r}" if task else "")
        + ":\n  "
        + "\n  ".join(tried)
        + (
            "\nbuild it locally (python -m swe_gym.images build), pull it, or choose another "
            "pull_policy (never, if-missing, always)"
        )
    )


# ------------------------------------------------------------------------------------------ CLI


def _load(source: str, ids: Iterable[str] | None) -> list[Task]:
    from swe_gym.tasks import load_tasks

    return load_tasks(source, instance_ids=list(ids) if ids else None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m swe_gym.images",
        description=(
            'Docker images for swe_gym tasks. Start the daemon first: eval "$(.ci/docker-up.sh)". '
            "'base' makes the Debian base image (debootstrap from this machine's apt mirror, about "
            "a minute the first time, seconds from the cached tarball); 'build' resolves or builds "
            "every task's image; 'resolve' prints the image each task would use."
        ),
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("base", help="build the base image swe-gym/base:<suite>")
    b.add_argument("--suite", default=DEFAULT_SUITE, help="Debian suite (default: %(default)s)")
    b.add_argument("--tag", default=None, help="image tag (default: swe-gym/base:<suite>)")
    b.add_argument("--rebuild", action="store_true", help="re-run debootstrap even if cached")
    b.add_argument("--mirror", default=None, help="Debian mirror URI (default: from apt sources)")
    for name in ("build", "resolve"):
        p = sub.add_parser(name, help=f"{name} the image of each task")
        p.add_argument(
            "--tasks", default="starter", help="task source for load_tasks (default: starter)"
        )
        p.add_argument("--ids", nargs="*", default=None, help="only these instance ids")
        p.add_argument("--pull-policy", default="if-missing", choices=PULL_POLICIES)
        if name == "build":
            p.add_argument("--network", default=None, help="build network: none (default) or host")
            p.add_argument("--rebuild", action="store_true", help="rebuild env and instance images")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "base":
            print(
                build_base(suite=args.suite, tag=args.tag, rebuild=args.rebuild, mirror=args.mirror)
            )
            return 0
        tasks = _load(args.tasks, args.ids)
        failed = 0
        for t in tasks:
            try:
                if args.cmd == "resolve":
                    name = ensure_image(t, pull_policy=args.pull_policy, build=False)
                elif args.rebuild:
                    name = build_instance(t, build_network=args.network, rebuild=True)
                else:
                    name = ensure_image(t, pull_policy=args.pull_policy, build_network=args.network)
                print(f"{t.instance_id}\t{name}")
            except ImageError as e:
                failed += 1
                print(f"{t.instance_id}\tERROR {e}", file=sys.stderr)
        return 1 if failed else 0
    except SWEGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
