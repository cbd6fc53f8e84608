"""The Docker backend's layers for a task environment: the same recipe, the same Python.

The project's daemon builds without network, and nothing may download an interpreter, so the
environment is built on the host (``swe_gym.taskenv``) and copied into the image: the
interpreter's prefix at its host path (the venv's ``python`` links to it), the environment at
``IMAGE_ENV_ROOT`` with its scripts' paths rewritten (its editable install names ``/testbed``,
the same in both). The env image puts the venv first on
``PATH``; the instance image gets the install step's generated files in its testbed (excluded
from git there) instead of running the install step again. The interpreter is the host's
build: it needs the shared libraries the base image has (checked at build: ``import ssl``).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from swe_gym.taskenv.build import TaskEnv
from swe_gym.taskenv.tree import copy_generated

LAYOUT_VERSION = 3  # bump when env_dockerfile changes what it builds
IMAGE_ENV_ROOT = "/opt/swe_gym/env"  # not the host's cache path: the sandbox's /tmp is a tmpfs


def env_dockerfile(env: TaskEnv, base: str, owner: str) -> tuple[str, dict[str, Path]]:
    """(Dockerfile, context files) of the env image holding ``env``."""
    prefix = env.manifest["interpreter_prefix"]
    venv = f"{IMAGE_ENV_ROOT}/venv"
    parents = sorted({str(p) for p in Path(prefix).parents if str(p) != "/"})
    lines = [
        f"FROM {base}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"COPY python {prefix}",
        f"COPY env {IMAGE_ENV_ROOT}",
        # scripts and activation files name the venv's host path: point them at the image's
        f"RUN grep -rlI -- {env.root} {venv}/bin | xargs -r sed -i 's|{env.root}|{IMAGE_ENV_ROOT}|g'",
        # any uid may reach the interpreter (COPY under /root, which may be 0700)
        f'RUN for d in {" ".join(parents)}; do chmod o+x "$d" 2>/dev/null || true; done',
        f"ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
        f"VIRTUAL_ENV={venv}",
        # the host-built interpreter must run on the base's libraries
        "RUN python -c 'import ssl, sqlite3, ctypes, zlib' && python --version",
        f"LABEL owner={owner} swe-gym.layer=env swe-gym.taskenv={env.key}",
    ]
    return "\n".join(lines) + "\n", {"python": Path(prefix), "env": env.root}


def env_tag(env: TaskEnv, base: str, owner: str) -> str:
    """The env image's tag: the environment's key, its interpreter, the base and this layout
    (not the host path of the cache: the image content is the same from any cache)."""
    key = repr((LAYOUT_VERSION, env.key, env.manifest["interpreter_prefix"], base, owner))
    return f"swe-gym/env:task-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


_SKIP = re.compile(r"python/lib/python[0-9.]+/(site-packages|dist-packages|test)(/|$)")


def skip_in_context(name: str) -> bool:
    """Context members left out: the interpreter's own site-packages (the host's packages,
    gigabytes for the toolkit's interpreter; the venv never reads them) and its test suite."""
    return bool(_SKIP.match(name))


def prepare_testbed(env: TaskEnv, testbed: Path) -> list[str]:
    """Put the install step's generated files into the instance context's testbed."""
    return copy_generated(env, testbed, [testbed / ".git"])


def without_install(instance: dict) -> dict:
    """The instance recipe with its install step taken out (the environment holds it)."""
    return {k: v for k, v in instance.items() if k not in ("pre_install", "install")}


__all__ = [
    "IMAGE_ENV_ROOT",
    "env_dockerfile",
    "env_tag",
    "prepare_testbed",
    "skip_in_context",
    "without_install",
]
