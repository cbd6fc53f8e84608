"""The ``uv`` executable (the PyPI package ``uv``, a dependency) and its offline-of-Python
settings: uv never downloads an interpreter here (``UV_PYTHON_DOWNLOADS=never``)."""

from __future__ import annotations

import os
import shutil
import subprocess

from swe_gym.errors import SWEGymError


class UvMissing(SWEGymError):
    """uv is not installed."""


def uv() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    path = shutil.which("uv")
    if path is None:
        raise UvMissing("the task environment builder needs uv: pip install uv")
    return path


def uv_env() -> dict[str, str]:
    """uv's environment: no interpreter downloads, no user or system uv config."""
    env = dict(os.environ)
    env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1"})
    env.pop("VIRTUAL_ENV", None)
    return env


def run_uv(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [uv(), *args], env=uv_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


__all__ = ["UvMissing", "run_uv", "uv", "uv_env"]
