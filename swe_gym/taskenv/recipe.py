"""A task's environment recipe, from the row's own data, and the key its environment is cached by.

Source, in order: the row's ``install_config`` (SWE-rebench) when it says how to install
anything (``python``, packages, requirements or an install step), else swebench's spec for
(``repo``, ``version``) (``swe_gym.taskenv.specs``), else none (the host's interpreter).
The key is a hash of what the build does (python, packages, the requirement files' contents,
pre_install, install, the commit the install step runs at, the resolution date), never the
instance id: every task with the same recipe shares one environment.

``exclude_newer``: the resolution date (uv ``--exclude-newer``) is the recipe's own when it
sets one, else the commit date of ``environment_setup_commit`` (shared by every task of a
SWE-bench version), else the row's ``created_at``; none when neither is known.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from swe_gym.taskenv.specs import version_spec
from swe_gym.tasks import Task

RECIPE_VERSION = 1  # bump when the builder's output for one recipe changes
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Recipe:
    """What to build. ``source``: ``install_config``, ``swebench`` or ``none``."""

    source: str
    python: str = ""  # "3.9"; empty: the host's version
    packages: list[str] = field(default_factory=list)  # pip requirement strings
    requirements: dict[str, str] = field(default_factory=dict)  # repo path -> its text
    pre_install: list[str] = field(default_factory=list)
    install: str = ""  # shell, run in the tree at ``setup_commit`` (e.g. pip install -e .)
    setup_commit: str = ""
    exclude_newer: str = ""  # YYYY-MM-DD
    env_vars: dict[str, str] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)  # parts the uv builder cannot do

    @property
    def key(self) -> str:
        body = {k: v for k, v in asdict(self).items() if k not in ("source", "env_vars")}
        body["v"] = RECIPE_VERSION
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]

    @property
    def empty(self) -> bool:
        return not (self.python or self.packages or self.requirements or self.install)


def _as_list(v: Any) -> list[str]:
    if not v:
        return []
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


def _raw_spec(task: Task) -> tuple[dict[str, Any], str]:
    cfg = task.install_config or {}
    if any(cfg.get(k) for k in ("python", "packages", "pip_packages", "install", "reqs_path")):
        return cfg, "install_config"
    spec = version_spec(task.repo, task.version) if task.version else None
    if spec:
        return spec, "swebench"
    return cfg, "none"


def recipe_for(task: Task, read_file=None, commit_date=None) -> Recipe:  # noqa: ANN001
    """The row's recipe. ``read_file(commit, path) -> str | None`` reads a requirements file
    from the clone; ``commit_date(commit) -> str | None`` dates the setup commit."""
    spec, source = _raw_spec(task)
    if source == "none":
        return Recipe("none", env_vars=dict(spec.get("env_vars") or {}))
    unsupported: list[str] = []
    packages = _as_list(spec.get("pip_packages"))
    reqs: dict[str, str] = {}
    setup = task.environment_setup_commit or task.base_commit
    pk = spec.get("packages") or ""
    req_paths = _as_list(spec.get("reqs_path"))
    if pk == "requirements.txt" and not req_paths:
        req_paths = ["requirements.txt"]
    elif pk == "environment.yml" or spec.get("env_yml_path"):
        unsupported.append("a conda environment.yml (the uv builder installs pip packages only)")
    elif isinstance(pk, str) and pk.strip() and pk != "requirements.txt":
        packages = shlex.split(pk) + packages  # conda package names; pip has most of them
    for path in req_paths:
        text = read_file(setup, path) if read_file else None
        if text is None:
            unsupported.append(f"requirements file {path} not found at {setup[:12]}")
        else:
            reqs[path] = text
    date = str((task.install_config or {}).get("exclude_newer") or "")
    if not date and task.environment_setup_commit and commit_date:
        date = commit_date(task.environment_setup_commit) or ""
    date = date or task.created_at
    m = _DATE.search(date or "")
    install = spec.get("install") or ""
    if isinstance(install, list):
        install = " && ".join(install)
    return Recipe(
        source=source,
        python=str(spec.get("python") or ""),
        packages=packages,
        requirements=reqs,
        pre_install=_as_list(spec.get("pre_install")),
        install=install,
        setup_commit=setup if install else "",
        exclude_newer=m.group(0) if m else "",
        env_vars={str(k): str(v) for k, v in (spec.get("env_vars") or {}).items()},
        unsupported=unsupported,
    )


def host_satisfies(recipe: Recipe) -> bool:
    """The host interpreter (the one running this toolkit) meets the recipe as it stands:
    same minor version (or none asked),
    every package requirement met by an installed distribution, nothing to install or run."""
    if recipe.requirements or recipe.install or recipe.pre_install or recipe.unsupported:
        return False
    if recipe.python and recipe.python != f"{sys.version_info[0]}.{sys.version_info[1]}":
        return False
    from packaging.requirements import InvalidRequirement, Requirement

    for text in recipe.packages:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return False
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            return False
    return True


__all__ = ["RECIPE_VERSION", "Recipe", "host_satisfies", "recipe_for"]
