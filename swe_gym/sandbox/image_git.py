"""A task image's own git objects on the host, for diffing when no local repository is at hand.

An image pulled from a registry has its repository only inside it. Its ``/testbed/.git`` is
copied out once per image id (from a container that is created, never started: nothing of any
agent ever ran there) into the toolkit cache, and serves as the base objects of the diff.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from swe_gym.errors import SandboxError
from swe_gym.paths import cache_root
from swe_gym.sandbox.objects import host_git
from swe_gym.sandbox.treediff import extract_archive

COPY_TIMEOUT = 1800.0


def image_objects(client: Any, image: str | None, base: str) -> tuple[list[str], str]:
    """(object directories, full sha of ``base``) from ``image``'s ``/testbed/.git``."""
    if image is None:
        raise SandboxError("no image to read the base commit's objects from")
    image_id = client.images.get(image).id.split(":")[-1][:32]
    dest = cache_root() / "image_git" / image_id
    if not (dest / "HEAD").exists():
        _copy_git(client, image, dest)
    try:
        sha = host_git("rev-parse", "--verify", "-q", f"{base}^{{commit}}", cwd=dest)
    except SandboxError:
        raise SandboxError(f"base_commit {base!r} is not in the image {image!r}") from None
    return [str(dest / "objects")], sha.decode().strip()


def _copy_git(client: Any, image: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=dest.parent))
    container = client.containers.create(image, ["true"], network_mode="none")
    try:
        stream, _ = client.api.get_archive(container.id, "/testbed/.git")
        extract_archive(stream, str(tmp), deadline=time.monotonic() + COPY_TIMEOUT)
        with contextlib.suppress(OSError):
            os.rename(tmp, dest)  # another process may have won: theirs is as good
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        shutil.rmtree(tmp, ignore_errors=True)
