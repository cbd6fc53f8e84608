"""What every image step shares: names, tags and labels, the image errors, per-tag locks."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any

from swe_gym.errors import SandboxUnavailable

BASE_REPOSITORY = "swe-gym/base"
DEFAULT_SUITE = "bookworm"
WORKDIR = "/testbed"
LABEL_OWNER = "swe-gym"

# One lock per image tag: two threads that need the same image build it once.
_tag_locks: dict[str, threading.Lock] = {}
_tag_locks_guard = threading.Lock()


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


def slug(text: str, limit: int = 100) -> str:
    """``text`` as a Docker tag component (lowercase, ``[a-z0-9_.-]``, at most ``limit``)."""
    s = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.")
    return s[:limit] or "task"


def short_hash(obj: Any, n: int = 12) -> str:
    """The first ``n`` hex digits of the SHA-256 of ``obj`` as canonical JSON."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:n]


def base_tag(suite: str = DEFAULT_SUITE) -> str:
    """The base image's tag for a Debian suite: ``swe-gym/base:<suite>``."""
    return f"{BASE_REPOSITORY}:{suite}"


def image_exists(client: Any, name: str) -> bool:
    """Whether the daemon has an image named ``name``."""
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def tag_lock(tag: str) -> threading.Lock:
    """The lock held while making the image ``tag`` (one per tag, for this process)."""
    with _tag_locks_guard:
        return _tag_locks.setdefault(tag, threading.Lock())


def tail_lines(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
