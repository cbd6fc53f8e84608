"""A task's environment recipe, from the row's own data, and the key its environment is cached by.

Source, in order: the row's ``install_config`` (SWE-rebench) when it says how to install
anything (``python``, packages, requirements or an install step), else swebench's spec for
(``repo``, ``version``) (``swe_gym.taskenv.specs``), else none (the host's interpreter).
``swe_gym.taskenv.overrides`` then applies what a user set per repository or row.

Where each part is read, as SWE-bench's harness does it: the requirement files at
``environment_setup_commit`` (its environment image), the install step at ``base_commit`` (its
instance image: ``git reset --hard <base_commit>``, then ``pre_install`` and ``install``). The
two differ when a version's setup files changed between them (a dependency added, a build
backend swapped): installed at the setup commit, such a row's base tree would run against
another commit's install.

The key is a hash of what the build does (python, packages, the requirement files' contents,
the seed overrides, pre_install, install, the resolution date, and the *install inputs*: the
blob ids at the install commit of the files an install reads, ``setup.py``, ``setup.cfg``,
``pyproject.toml``, requirement files and native sources), never the instance id nor the base
commit itself: rows whose install would read the same files share one environment.

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

from swe_gym.taskenv.overrides import overrides_for
from swe_gym.taskenv.specs import version_spec
from swe_gym.tasks import Task

RECIPE_VERSION = 2  # bump when the builder's output for one recipe changes
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Recipe:
    """What to build. ``source``: ``install_config``, ``swebench`` or ``none``."""

    source: str
    python: str = ""  # "3.9"; empty: the host's version
    packages: list[str] = field(default_factory=list)  # pip requirement strings
    requirements: dict[str, str] = field(default_factory=dict)  # repo path -> its text
    pre_install: list[str] = field(default_factory=list)
    install: str = ""  # shell, run in the tree at ``install_commit`` (e.g. pip install -e .)
    setup_commit: str = ""  # where the requirement files were read
    install_commit: str = ""  # where the install step runs (the row's base commit)
    install_inputs: str = ""  # digest of the files at install_commit an install reads
    exclude_newer: str = ""  # YYYY-MM-DD
    seed: list[str] = field(default_factory=list)  # overrides of the date's pip/setuptools/wheel
    extra_packages: list[str] = field(default_factory=list)  # an override's, installed undated
    build_constraints: bool = True  # the install step's build dependencies as of the date
    env_vars: dict[str, str] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)  # parts the uv builder cannot do

    @property
    def key(self) -> str:
        skip = ("source", "env_vars", "setup_commit", "install_commit")
        body = {k: v for k, v in asdict(self).items() if k not in skip}
        if (self.install or self.pre_install) and not self.install_inputs:
            # no clone to read the inputs from: the commit itself
            body["install_commit"] = self.install_commit
        body["v"] = RECIPE_VERSION
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]

    @property
    def install_rev(self) -> str:
        """The commit the install step runs at (a recipe made by hand may set only the setup one)."""
        return self.install_commit or self.setup_commit

    @property
    def empty(self) -> bool:
        return not (self.python or self.packages or self.requirements or self.install)


_INSTALL_FILES = frozenset(
    ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "Cargo.toml", "meson.build",
     "CMakeLists.txt", "Makefile")
)  # fmt: skip
_NATIVE = (
    ".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".pyx", ".pxd", ".pxi", ".f", ".f90", ".rs", ".cu"
)  # fmt: skip


def is_install_input(path: str) -> bool:
    """A file whose content can change what an install step builds: the top-level setup and
    build files, requirement files, and native sources anywhere (compiled by the install)."""
    name = path.rsplit("/", 1)[-1]
    if "/" not in path and (name in _INSTALL_FILES or name.startswith("requirements")):
        return True
    return path.startswith("requirements/") or name.endswith(_NATIVE)


def inputs_digest(blobs: list[tuple[str, str]]) -> str:
    """Digest of (path, blob id) pairs, install inputs only."""
    h = hashlib.sha256()
    for path, blob in sorted(blobs):
        if is_install_input(path):
            h.update(f"{path}\0{blob}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:20]


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


def recipe_for(task: Task, read_file=None, commit_date=None, install_inputs=None) -> Recipe:  # noqa: ANN001
    """The row's recipe. ``read_file(commit, path) -> str | None`` reads a requirements file
    from the clone; ``commit_date(commit) -> str | None`` dates the setup commit;
    ``install_inputs(commit) -> str | None`` digests the files an install reads there."""
    spec, source = _raw_spec(task)
    if source == "none":
        return Recipe("none", env_vars=dict(spec.get("env_vars") or {}))
    over = overrides_for(task.repo, task.version, task.instance_id, task.install_config)
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
            what = "environment_setup_commit" if task.environment_setup_commit else "base_commit"
            unsupported.append(
                f"requirements file {path} not found at {what} {setup[:12]} in the clone"
            )
        else:
            reqs[path] = text
    date = str(over.get("exclude_newer") or (task.install_config or {}).get("exclude_newer") or "")
    if not date and task.environment_setup_commit and commit_date:
        date = commit_date(task.environment_setup_commit) or ""
    date = date or task.created_at
    m = _DATE.search(date or "")
    install = spec.get("install") or ""
    if isinstance(install, list):
        install = " && ".join(install)
    at = setup if over.get("install_at") == "setup" else task.base_commit
    pre = _as_list(spec.get("pre_install"))
    digest = (install_inputs(at) or "") if (install or pre) and install_inputs else ""
    return Recipe(
        source=source,
        python=str(spec.get("python") or ""),
        packages=packages,
        requirements=reqs,
        pre_install=pre,
        install=install,
        setup_commit=setup if (install or pre or reqs) else "",
        install_commit=at if (install or pre) else "",
        install_inputs=digest,
        exclude_newer=m.group(0) if m else "",
        seed=list(over.get("seed", [])),
        extra_packages=list(over.get("pip_packages", [])),
        build_constraints=bool(over.get("build_constraints", True)),
        env_vars={str(k): str(v) for k, v in (spec.get("env_vars") or {}).items()},
        unsupported=unsupported,
    )


def host_satisfies(recipe: Recipe) -> bool:
    """The host interpreter (the one running this toolkit) meets the recipe as it stands:
    same minor version (or none asked),
    every package requirement met by an installed distribution, nothing to install or run."""
    if recipe.requirements or recipe.install or recipe.pre_install or recipe.unsupported:
        return False
    if recipe.extra_packages:
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


__all__ = [
    "RECIPE_VERSION", "Recipe", "host_satisfies", "inputs_digest", "is_install_input", "recipe_for",
]  # fmt: skip
