"""``DockerSandbox.fork(n)``: n started containers holding a running sandbox's files.

Two routes (``method``), both with the parent paused by the daemon (its cgroup frozen) while
its files are read, so the copy is one consistent moment:

* ``"commit"`` (default, ``FORK_METHODS``; ``SWE_GYM_DOCKER_FORK`` sets it): ``docker commit``
  of the parent into a temporary image (only its writable layer is written: what the agent
  changed, in ``/testbed`` and anywhere else, e.g. packages it installed), then n containers
  from it. The image is labelled (``owner``, ``swe-gym.run``, ``swe-gym.fork-image``) and
  removed by the last child to close; ``swe_gym.reap`` removes it after a crash.
* ``"archive"``: ``/testbed`` streamed out (``get_archive``, spooled to a temp file) and put
  into n fresh containers of the task's image, each emptying its own ``/testbed`` first. Only
  ``/testbed`` is carried, and every child writes the whole tree into its layer.

``benchmarks/bench_fork.py`` measures both. Each child is a ``ForkedDockerSandbox``: the same
limits and labels as the parent, its own ``swe-gym.episode`` and ``swe-gym.parent`` (the
parent's episode id), its own shell with the parent's shell state replayed
(``swe_gym.sandbox.fork``). ``/tmp`` (a tmpfs) and processes are not carried.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from swe_gym.errors import SandboxError, unknown_choice
from swe_gym.reap import (
    LABEL_EPISODE,
    LABEL_FORK_IMAGE,
    LABEL_OWNER,
    LABEL_PARENT,
    LABEL_RUN,
    LABEL_STARTED,
    OWNER,
)
from swe_gym.sandbox.docker import DockerSandbox, _start_slots
from swe_gym.sandbox.fork import (
    capture_shell_state,
    check_fork_count,
    close_all,
    each,
    replay_into,
)

FORK_METHODS = ("commit", "archive")
DEFAULT_FORK_METHOD = os.environ.get("SWE_GYM_DOCKER_FORK", "commit")


class ForkedDockerSandbox(DockerSandbox):
    """A fork's child: a ``DockerSandbox`` that also removes its temporary image on close,
    once no other child uses it."""

    fork_image: str | None = None

    def close(self) -> None:
        super().close()
        image, self.fork_image = self.fork_image, None
        if image is not None:
            remove_fork_image(self.client, image)


def remove_fork_image(client: Any, image: str) -> bool:
    """Remove a temporary fork image unless a container still uses it (409: a sibling)."""
    import docker.errors

    try:
        client.api.remove_image(image, noprune=False)
        return True
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:
        return False  # in use by a sibling (it removes it) or the daemon blinked (the reaper)


def fork_docker(parent: DockerSandbox, n: int, method: str | None = None) -> list[DockerSandbox]:
    """See the module docstring. ValueError for ``n`` or ``method``, SandboxError for a closed
    parent; a failure removes the children made so far and the temporary image."""
    check_fork_count(n)
    method = DEFAULT_FORK_METHOD if method is None else method
    if method not in FORK_METHODS:
        raise unknown_choice("fork method", method, FORK_METHODS)
    parent._require()
    state = capture_shell_state(parent.run, parent.output_limit)
    children: list[ForkedDockerSandbox] = []
    image: str | None = None
    try:
        if method == "commit":
            with _paused(parent):
                image = _commit(parent)
            children = [_child(parent, image) for _ in range(n)]
            _start_all(children, image, None)
        else:
            with tempfile.TemporaryFile(prefix="swe_gym_fork_") as tar:
                with _paused(parent):
                    _read_tree(parent, tar)
                children = [_child(parent, None) for _ in range(n)]
                _start_all(children, parent.image or "", tar)

        def shell(child: ForkedDockerSandbox) -> None:
            child._open_session()
            replay_into([child], state)

        each(shell, children)
    except BaseException:
        close_all(children)
        if image is not None:
            remove_fork_image(parent.client, image)
        raise
    return list(children)


def _child(parent: DockerSandbox, image: str | None) -> ForkedDockerSandbox:
    child = copy.copy(parent)
    child.__class__ = ForkedDockerSandbox  # same fields; close() also drops the image
    assert isinstance(child, ForkedDockerSandbox)
    child.episode_id = uuid.uuid4().hex[:12]
    child.labels = {
        **parent.labels,
        LABEL_EPISODE: child.episode_id,
        LABEL_PARENT: parent.episode_id,
    }
    child.container = child._session = None
    child._oom_kills, child._closed = 0, False
    child._lock = threading.RLock()
    child.fork_image = image
    return child


@contextlib.contextmanager
def _paused(parent: DockerSandbox) -> Iterator[None]:
    """The parent's processes frozen inside the block (``docker pause``)."""
    try:
        parent.container.pause()
    except Exception as e:
        raise parent._container_gone(e) from None
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            parent.container.unpause()


def _commit(parent: DockerSandbox) -> str:
    labels = {
        LABEL_OWNER: OWNER,
        LABEL_RUN: parent.run_id,
        LABEL_FORK_IMAGE: parent.episode_id,
        LABEL_STARTED: f"{time.time():.3f}",  # the reaper's age filter
    }
    try:
        # Already paused by us: the daemon's own pause would fail on a paused container.
        img = parent.container.commit(pause=False, conf={"Labels": labels})
    except Exception as e:
        raise SandboxError(f"docker commit of the parent failed, cannot fork: {e}") from None
    return str(img.id)


def _read_tree(parent: DockerSandbox, out: Any) -> None:
    """``/testbed`` of the parent as a tar stream into the file ``out`` (rewound after)."""
    try:
        stream, _ = parent.client.api.get_archive(parent.container.id, parent.workdir)
        for chunk in stream:
            out.write(chunk)
    except Exception as e:
        raise parent._container_gone(e) from None
    out.seek(0)


def _start_all(children: list[ForkedDockerSandbox], image: str, tar: Any) -> None:
    """Start each child's container from ``image`` (in parallel, within the process's start
    slots); with ``tar`` replace its ``/testbed`` (one at a time: one file position)."""

    def start(child: ForkedDockerSandbox) -> None:
        with _start_slots:
            child.container = child._create_with_retries(image)

    each(start, children)
    for child in children if tar is not None else []:
        rc, out = child.container.exec_run(["rm", "-rf", "--", child.workdir])
        if rc != 0:
            raise SandboxError(f"could not empty a fork child's {child.workdir}: {out[-500:]!r}")
        tar.seek(0)
        if not child.client.api.put_archive(child.container.id, "/", tar):
            raise SandboxError(f"the daemon refused the parent's {child.workdir} for a fork child")


__all__ = [
    "DEFAULT_FORK_METHOD",
    "FORK_METHODS",
    "LABEL_FORK_IMAGE",
    "LABEL_PARENT",
    "ForkedDockerSandbox",
    "fork_docker",
    "remove_fork_image",
]
