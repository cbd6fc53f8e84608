"""Interpreters already on this machine, and the one a recipe gets. Nothing is downloaded.

Looked for, in order: uv-managed interpreters (``uv python dir``), pyenv's versions
(``$PYENV_ROOT/versions``, ``~/.pyenv/versions``), then ``pythonX.Y`` executables in the
system directories and on ``PATH`` (pyenv's shims skipped: they answer for the global
version only). Each is asked its version once per process.

A recipe asking for ``X.Y`` gets the newest ``X.Y.*`` found. With none, ``PythonNotFound``
names the version, what was found, and how to get it; ``allow_nearest=True`` (sandbox option
``allow_nearest_python``, ``--allow-nearest-python``) takes the nearest minor version instead
(ties go to the newer one) and says so in the environment's manifest. Python 2 and 3.5 or
older cannot be built by uv: ``PythonNotFound`` too.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from swe_gym.errors import SWEGymError

_NAME = re.compile(r"python(\d)\.(\d+)$")
_SYSTEM_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")
UV_MIN = (3, 6)  # the oldest Python uv makes environments for


class PythonNotFound(SWEGymError):
    """No interpreter on this machine fits the recipe."""


@dataclass(frozen=True)
class Interpreter:
    path: str  # an executable outside any venv
    version: tuple[int, int, int]

    @property
    def minor(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def _uv_dir() -> list[str]:
    from swe_gym.taskenv.uvtool import uv

    try:
        out = subprocess.run(
            [uv(), "python", "dir"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(glob.glob(os.path.join(out, "*", "bin", "python3.*"))) if out else []


def _candidates() -> list[str]:
    found = _uv_dir()
    roots = {os.environ.get("PYENV_ROOT") or "", os.path.expanduser("~/.pyenv")}
    for root in sorted(r for r in roots if r):
        found += sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python[23].*")))
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if "/.pyenv/shims" not in p]
    for d in [*_SYSTEM_DIRS, *path]:
        found += sorted(glob.glob(os.path.join(d, "python[23].*")))
    out, seen = [], set()
    for p in found:
        if _NAME.search(os.path.basename(p)) and os.access(p, os.X_OK):
            real = os.path.realpath(p)
            if real not in seen and "/envs/" not in real:  # never one of our own venvs
                seen.add(real)
                out.append(p)
    return out


@functools.cache
def _ask(path: str) -> tuple[int, int, int] | None:
    try:
        r = subprocess.run(
            [path, "-c", "import sys; print('%d %d %d' % sys.version_info[:3])"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        a, b, c = (int(x) for x in r.stdout.split())
        return a, b, c
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def installed() -> list[Interpreter]:
    """Every interpreter found, newest first within a minor version."""
    out = []
    for p in _candidates():
        v = _ask(p)
        m = _NAME.search(os.path.basename(p))
        if v is not None and m and (v[0], v[1]) == (int(m.group(1)), int(m.group(2))):
            out.append(Interpreter(p, v))
    return sorted(out, key=lambda i: i.version, reverse=True)


def _parse(version: str) -> tuple[int, int]:
    m = re.match(r"\s*(\d+)\.(\d+)", version)
    if not m:
        raise PythonNotFound(f"cannot read a Python version from {version!r}")
    return int(m.group(1)), int(m.group(2))


def choose(version: str, allow_nearest: bool = False, what: str = "") -> tuple[Interpreter, str]:
    """(interpreter, note) for ``version`` ("3.9"); note is empty on an exact match."""
    want = _parse(version)
    found = [i for i in installed() if i.version[:2] >= UV_MIN]
    exact = [i for i in found if i.version[:2] == want]
    if exact:
        return exact[0], ""
    have = ", ".join(sorted({i.minor for i in found}, key=_parse)) or "none"
    if allow_nearest and found and want >= UV_MIN:
        best = min(
            found,
            key=lambda i: (
                abs(i.version[1] - want[1]) + 100 * abs(i.version[0] - want[0]),
                -i.version[1],
            ),
        )
        return best, f"Python {version} not found; using the nearest, {best.minor} ({best.path})"
    if want < UV_MIN:
        raise PythonNotFound(
            f"{what}uv cannot make environments for Python {version} (oldest: "
            f"{UV_MIN[0]}.{UV_MIN[1]}); run this task with backend='docker' and its image"
        )
    raise PythonNotFound(
        f"{what}no Python {version} on this machine (found: {have}). Get it with `pyenv "
        f"install {version}` (or `uv python install {version}`, or your system's package), "
        "then retry; or allow the nearest version: sandbox option allow_nearest_python=True "
        "(python -m swe_gym.validate --allow-nearest-python)"
    )


def host_prefix(interp_path: str) -> str:
    """The installation prefix holding ``interp_path`` (bound read-only in sandboxes)."""
    real = Path(os.path.realpath(interp_path))
    return str(real.parent.parent)


__all__ = ["Interpreter", "PythonNotFound", "choose", "host_prefix", "installed"]
