"""Task environments: each task runs in the environment its row's recipe describes.

``resolve(task, environment=...)`` gives the ``TaskEnv`` a sandbox uses (``None``: the host's
interpreter). ``environment``:

- ``"auto"`` (default): a built environment when the row has a recipe the host does not
  already meet (another Python minor version, a package pin the host's version misses, an
  install step or a requirements file); the host's interpreter for the bundled SWEStarter
  tasks (pure Python, pytest only: offline and fast) and for rows with no recipe or one the
  host meets as it is (``swe_gym.taskenv.recipe.host_satisfies``).
- ``"task"``: always a built environment (an error for a row with no recipe).
- ``"host"``: the host's interpreter, as before task environments.

See ``recipe`` (where a recipe comes from, its key), ``pythons`` (which interpreter),
``build`` (the uv build, the cache layout), ``install`` (the install step's sandbox).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from swe_gym.errors import unknown_choice
from swe_gym.taskenv.build import EnvBuildError, TaskEnv, ensure, envs_root
from swe_gym.taskenv.pythons import PythonNotFound
from swe_gym.taskenv.recipe import Recipe, host_satisfies, inputs_digest, recipe_for
from swe_gym.tasks import Task

POLICIES = ("auto", "task", "host")


def _clone_readers(repo: Path | None):  # noqa: ANN202
    if repo is None:
        return None, None, None
    from swe_gym.errors import SandboxError
    from swe_gym.sandbox.objects import host_git, tree_blobs

    def read_file(commit: str, path: str) -> str | None:
        try:
            return host_git("show", f"{commit}:{path}", cwd=repo).decode("utf-8", "replace")
        except SandboxError:
            return None

    def commit_date(commit: str) -> str | None:
        try:
            return host_git("log", "-1", "--format=%cI", commit, cwd=repo).decode().strip()
        except SandboxError:
            return None

    def install_inputs(commit: str) -> str | None:
        try:
            return inputs_digest(tree_blobs(repo, commit))
        except SandboxError:
            return None

    return read_file, commit_date, install_inputs


_RECIPES: dict[str, Recipe] = {}  # per process: a reset reads no clone twice


def task_recipe(task: Task, repos_dir: str | os.PathLike | None = None) -> Recipe:
    """The task's recipe (requirement files and the setup commit's date read from its clone)."""
    from swe_gym.repos import local_repo

    try:
        repo = str(local_repo(task.repo, repos_dir))
    except Exception:
        repo = ""
    key = json.dumps(
        [task.instance_id, task.repo, task.version, task.environment_setup_commit,
         task.base_commit, task.created_at, task.install_config, repo,
         os.environ.get("SWE_GYM_SWEBENCH_SPECS"), os.environ.get("SWE_GYM_ENV_OVERRIDES")],
        sort_keys=True, default=str,
    )  # fmt: skip
    if key not in _RECIPES:
        if len(_RECIPES) > 4096:
            _RECIPES.clear()
        _RECIPES[key] = recipe_for(task, *_clone_readers(Path(repo) if repo else None))
    return _RECIPES[key]


def uses_host(task: Task, recipe: Recipe, environment: str) -> bool:
    if environment not in POLICIES:
        raise unknown_choice("environment", environment, POLICIES)
    if environment == "host":
        return True
    if environment == "task":
        return False
    try:
        from swe_gym.starter import STARTER_REPOS
    except ImportError:
        STARTER_REPOS = frozenset()
    return task.repo in STARTER_REPOS or recipe.source == "none" or host_satisfies(recipe)


def resolve(
    task: Task,
    environment: str = "auto",
    repos_dir: str | os.PathLike | None = None,
    allow_nearest_python: bool = False,
) -> TaskEnv | None:
    """The environment ``task`` runs in (built now if needed), or None for the host's.
    Raises ``EnvBuildError`` / ``PythonNotFound`` with the reason when it cannot be built."""
    if environment not in POLICIES:
        raise unknown_choice("environment", environment, POLICIES)
    if environment == "host":
        return None
    recipe = task_recipe(task, repos_dir)
    if uses_host(task, recipe, environment):
        return None
    if recipe.source == "none":
        raise EnvBuildError(
            f"{task.instance_id}: no recipe (no install_config, and no swebench spec for "
            f"{task.repo} {task.version or '(no version)'}; see swe_gym.taskenv.specs)"
        )
    runner = None
    if recipe.install or recipe.pre_install:
        from swe_gym.repos import local_repo
        from swe_gym.taskenv.install import make_runner

        runner = make_runner(task.repo, local_repo(task.repo, repos_dir))
    label = f"{task.repo}@{task.version or task.instance_id}"
    return ensure(recipe, label=label, allow_nearest=allow_nearest_python, install_runner=runner)


__all__ = [
    "POLICIES",
    "EnvBuildError",
    "PythonNotFound",
    "Recipe",
    "TaskEnv",
    "envs_root",
    "recipe_for",
    "resolve",
    "task_recipe",
    "uses_host",
]
