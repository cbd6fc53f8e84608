"""The tools an environment is built with, as of the row's date: the seed packages (``pip``,
``setuptools``, ``wheel``) and the build dependencies of its install step.

A venv gets today's seeds from ``uv venv --seed`` whatever the resolution date says, and an
install step's build isolation fetches today's build backends. Both break old rows: setuptools
81 dropped ``pkg_resources`` (imported at run time by many older packages), pip 25 dropped the
``setup.py develop`` editable install that a ``setup.py``-only project needs, and today's
setuptools turns ``develop`` into a PEP 660 install that an old pip cannot do. So the seeds are installed with ``--exclude-newer`` at
the cut, and the install step's pip gets a constraints file (``PIP_CONSTRAINT``, which an
era pip applies to its build isolation too, and ``PIP_BUILD_CONSTRAINT`` for a newer one)
pinning ``setuptools`` and ``wheel`` to the venv's and the common build backends to their
last release before the cut.

The cut is the resolution date, raised to the interpreter's release when that is later (a
2019 pip does not run on Python 3.12): the oldest tools that run on it.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

from swe_gym.taskenv.uvtool import run_uv

SEEDS = ("pip", "setuptools", "wheel")
BUILD_BACKENDS = ("setuptools-scm", "flit-core", "hatchling", "poetry-core", "cython")
# CPython's release dates (x.y.0): the earliest tools that run on that interpreter.
PYTHON_RELEASED = {
    "3.6": "2016-12-23", "3.7": "2018-06-27", "3.8": "2019-10-14", "3.9": "2020-10-05",
    "3.10": "2021-10-04", "3.11": "2022-10-24", "3.12": "2023-10-02", "3.13": "2024-10-07",
    "3.14": "2025-10-07",
}  # fmt: skip
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def seed_cut(date: str, minor: str) -> tuple[str, str]:
    """(the cut for the seeds, a note when it differs from ``date``); ``""``: no cut."""
    released = PYTHON_RELEASED.get(minor, "")
    if date and released and released > date:
        return (
            released,
            f"seeds as of {released} (python {minor}'s release; the row's date {date} is older)",
        )
    return date, ""


def _cut_args(cut: str) -> list[str]:
    return ["--exclude-newer", f"{cut}T23:59:59Z"] if cut else []


def installed(python: str) -> dict[str, str]:
    """name -> version of what the venv has."""
    p = run_uv("pip", "list", "--python", python, "--format", "json")
    if p.returncode != 0:
        return {}
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(p.stdout or "[]")}


def install_seeds(python: str, cut: str, overrides: list[str], check) -> dict[str, str]:  # noqa: ANN001
    """Install the seeds as of ``cut`` (an override replaces the date's pick of its package);
    ``check(process, what)`` logs and raises. Returns the seeds' versions."""
    over = {canonicalize_name(m.group(1)): r for r in overrides if (m := _NAME.match(r))}
    dated = [s for s in SEEDS if s not in over]
    args = ["pip", "install", "--python", python]
    if dated:
        check(
            run_uv(*args, *_cut_args(cut), *dated),
            "uv " + " ".join([*args, *_cut_args(cut), *dated]),
        )
    if over:
        check(run_uv(*args, *over.values()), "uv " + " ".join([*args, *over.values()]))
    have = installed(python)
    return {s: have.get(s, "") for s in SEEDS}


def _compile(python: str, cut: str, names: list[str]) -> dict[str, str] | None:
    with tempfile.NamedTemporaryFile("w", suffix=".in") as f:
        f.write("\n".join(names) + "\n")
        f.flush()
        p = run_uv(
            "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--no-deps",
            "--python", python, *_cut_args(cut), f.name,
        )  # fmt: skip
    if p.returncode != 0:
        return None
    pins: dict[str, str] = {}
    for line in p.stdout.splitlines():
        name, _, version = line.strip().partition("==")
        if version:
            pins[canonicalize_name(name)] = version.split(";")[0].strip()
    return pins


def build_constraints(python: str, cut: str, path: Path) -> list[str]:
    """Write the install step's constraints to ``path``: ``setuptools`` and ``wheel`` as the
    venv has them, each build backend at its last release before ``cut`` (left out where it
    has none for this interpreter). Returns the lines."""
    have = installed(python)
    lines = [f"{s}=={have[s]}" for s in ("setuptools", "wheel") if have.get(s)]
    if cut:
        pins = _compile(python, cut, list(BUILD_BACKENDS))
        if pins is None:  # one of them has no release for this interpreter by then
            pins = {}
            for name in BUILD_BACKENDS:
                pins.update(_compile(python, cut, [name]) or {})
        lines += [f"{n}=={v}" for n, v in sorted(pins.items()) if n not in ("setuptools", "wheel")]
    path.write_text("\n".join(lines) + "\n")
    return lines


__all__ = [
    "BUILD_BACKENDS",
    "PYTHON_RELEASED",
    "SEEDS",
    "build_constraints",
    "install_seeds",
    "seed_cut",
]
