"""Local builds of a task's environment and instance images (``docker build`` from an in-memory
context holding the repository at ``base_commit`` and no later history)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swe_gym.images.base import build_base
from swe_gym.images.common import (
    LABEL_OWNER,
    BuildError,
    ImageError,
    base_tag,
    image_exists,
    tag_lock,
    tail_lines,
)
from swe_gym.images.recipes import (
    Recipe,
    env_dockerfile,
    instance_dockerfile,
    instance_tag,
    recipe_for,
)
from swe_gym.taskenv import docker_layers
from swe_gym.tasks import Task

log = logging.getLogger(__name__)

_build_slots = threading.BoundedSemaphore(int(os.environ.get("SWE_GYM_MAX_BUILDS", "2")))


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
                        tag, tail_lines("\n".join(lines)), chunk["error"].strip().splitlines()[0]
                    )
        except docker.errors.APIError as e:
            lines.append(str(e))
            raise BuildError(tag, tail_lines("\n".join(lines)), str(e)) from None
    if not image_exists(client, tag):
        raise BuildError(tag, tail_lines("\n".join(lines)), "the build ended without an image")


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
    if not image_exists(client, base):
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
        with tag_lock(env_tag):
            if rebuild or not image_exists(client, env_tag):
                log.info("building task environment image %s", env_tag)
                dockerfile, files = docker_layers.env_dockerfile(tenv, base, LABEL_OWNER)
                _docker_build(
                    client, env_tag, dockerfile, files, network, skip=docker_layers.skip_in_context
                )
        recipe = Recipe(env={}, instance=docker_layers.without_install(recipe.instance), base=base)
    else:
        env_tag = recipe.env_tag
        with tag_lock(env_tag):
            if rebuild or not image_exists(client, env_tag):
                log.info("building environment image %s", env_tag)
                _docker_build(client, env_tag, env_dockerfile(recipe), None, network)
    tag = instance_tag(task, recipe, env_tag if tenv else None)
    with tag_lock(tag):
        if rebuild or not image_exists(client, tag):
            log.info("building instance image %s for %s", tag, task.instance_id)
            with tempfile.TemporaryDirectory(prefix="swe-gym-ctx-") as tmp:
                testbed = _testbed_context(task, Path(tmp), repos_dir)
                if tenv is not None:
                    docker_layers.prepare_testbed(tenv, testbed)
                _docker_build(
                    client,
                    tag,
                    instance_dockerfile(env_tag, recipe, task),
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


def taskenv_image_key(task: Task, repos_dir: str | os.PathLike | None) -> str | None:
    """The env image tag ``build_instance`` would use, when its environment is already built
    (None otherwise: then the build finds or makes it)."""
    from swe_gym import taskenv
    from swe_gym.taskenv.build import load

    recipe = taskenv.task_recipe(task, repos_dir)
    if taskenv.uses_host(task, recipe, "auto") or (env := load(recipe.key)) is None:
        return None
    return docker_layers.env_tag(env, base_tag(), LABEL_OWNER)
