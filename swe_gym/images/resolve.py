"""Which image a task runs in: its own name, the published ones (pulled with retries), or a local
build (``ensure_image``)."""

from __future__ import annotations

import os
from typing import Any

from swe_gym.errors import unknown_choice
from swe_gym.images.build import build_instance, taskenv_image_key
from swe_gym.images.common import ImageError, image_exists
from swe_gym.images.recipes import instance_tag
from swe_gym.tasks import Task

PULL_POLICIES = ("never", "if-missing", "always")
# Pull failures seen in this process (name -> message), so an offline machine pays once.
_pull_failures: dict[str, str] = {}
_resolved: dict[tuple[str, str], str] = {}


def published_names(instance_id: str) -> list[str]:
    """SWE-bench and SWE-rebench image names for an instance id (``__`` -> ``_1776_``)."""
    key = instance_id.replace("__", "_1776_").lower()
    return [f"swebench/sweb.eval.x86_64.{key}", f"swerebench/sweb.eval.x86_64.{key}"]


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
    if cached and pull_policy != "always" and image_exists(client, cached):
        return cached

    names = [image] if image else candidates(task)  # type: ignore[arg-type]
    tried: list[str] = []
    if pull_policy != "always":
        for n in names:
            if image_exists(client, n):
                _resolved[key] = n
                return n
        if image is None and build:
            local = instance_tag(task, taskenv_key=taskenv_image_key(task, repos_dir))  # type: ignore[arg-type]
            if image_exists(client, local):
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
