"""Local build recipes: a task's ``install_config`` as environment and instance Dockerfiles,
and the tags they are keyed by."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from swe_gym.images.common import LABEL_OWNER, WORKDIR, base_tag, short_hash, slug
from swe_gym.tasks import Task

# Bumped when the layout of the generated Dockerfiles changes, so old cached images are not reused.
RECIPE_VERSION = 3
# Fields of install_config that shape the environment image (the rest need the repository).
ENV_FIELDS = ("python", "packages", "pip_packages", "env_vars", "env_yml_path", "reqs_path")
INSTANCE_FIELDS = ("pre_install", "install")


@dataclass(frozen=True)
class Recipe:
    """The local build recipe for one task: the environment part and the instance part."""

    env: dict[str, Any]
    instance: dict[str, Any]
    base: str

    @property
    def env_tag(self) -> str:
        return (
            f"swe-gym/env:{short_hash({'v': RECIPE_VERSION, 'base': self.base, 'env': self.env})}"
        )


def recipe_for(task: Task, base: str | None = None) -> Recipe:
    cfg = dict(task.install_config or {})
    env = {k: cfg[k] for k in ENV_FIELDS if cfg.get(k) not in (None, "", [], {})}
    inst = {k: cfg[k] for k in INSTANCE_FIELDS if cfg.get(k) not in (None, "", [], {})}
    return Recipe(env=env, instance=inst, base=base or base_tag())


def _as_commands(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value if str(v).strip()]


def _pip_step(requirements: list[str]) -> str:
    """Offline first (satisfied requirements are a no-op), then with the index if the build has
    network; a missing package fails the build with pip's own message in the log tail."""
    args = " ".join(_shell_quote(r) for r in requirements)
    return (
        f"python3 -m pip install --no-index --no-build-isolation {args} "
        f"|| python3 -m pip install {args}"
    )


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def env_dockerfile(recipe: Recipe) -> str:
    env = recipe.env
    lines = [
        f"FROM {recipe.base}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        # SWE-bench images and test commands say `python`; Debian's base only has `python3`.
        "RUN command -v python >/dev/null || ln -s /usr/bin/python3 /usr/local/bin/python",
    ]
    py = str(env.get("python", "")).strip()
    if py:
        # The base has Debian's python3; a recipe that asks for another one is recorded and
        # checked loudly rather than silently ignored (no conda without network here).
        lines.append(
            f"RUN have=$(python3 -c 'import sys;print(\"%d.%d\"%sys.version_info[:2])'); "
            f'if [ "$have" != {_shell_quote(py)} ]; then echo "note: recipe asks for python '
            f'{py}, the image has $have"; fi'
        )
    for k, v in (env.get("env_vars") or {}).items():
        lines.append(f"ENV {k}={json.dumps(str(v))}")
    pkgs = env.get("packages")
    if (
        isinstance(pkgs, str)
        and pkgs.strip()
        and pkgs.strip() not in ("requirements.txt", "environment.yml")
    ):
        lines.append(f"RUN {_pip_step(pkgs.split())}")
    elif isinstance(pkgs, list) and pkgs:
        lines.append(f"RUN {_pip_step([str(p) for p in pkgs])}")
    pip = env.get("pip_packages")
    if pip:
        lines.append(
            f"RUN {_pip_step(pip.split() if isinstance(pip, str) else [str(p) for p in pip])}"
        )
    lines.append(f"LABEL owner={LABEL_OWNER} swe-gym.layer=env")
    return "\n".join(lines) + "\n"


def instance_dockerfile(env_tag: str, recipe: Recipe, task: Task) -> str:
    inst = recipe.instance
    lines = [
        f"FROM {env_tag}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"COPY testbed {WORKDIR}",
        f"WORKDIR {WORKDIR}",
        # git refuses to work in a repository owned by another uid without this.
        f"RUN git config --system --add safe.directory '*' && git config --system user.email "
        f"agent@swe-gym.invalid && git config --system user.name swe-gym && git -C {WORKDIR} status --short | head -5",
    ]
    pkgs = recipe.env.get("packages")
    reqs = recipe.env.get("reqs_path")
    if pkgs == "requirements.txt" and reqs:
        for r in _as_commands(reqs):
            lines.append(f"RUN {_pip_step(['-r', r])}")
    for cmd in _as_commands(inst.get("pre_install")):
        lines.append(f"RUN {cmd}")
    for cmd in _as_commands(inst.get("install")):
        lines.append(f"RUN {cmd}")
    lines.append(
        f"LABEL owner={LABEL_OWNER} swe-gym.layer=instance swe-gym.repo={slug(task.repo)} "
        f"swe-gym.base_commit={task.base_commit}"
    )
    return "\n".join(lines) + "\n"


def instance_tag(task: Task, recipe: Recipe | None = None, taskenv_key: str | None = None) -> str:
    recipe = recipe or recipe_for(task)
    key = {
        "v": RECIPE_VERSION,
        "env": recipe.env_tag,
        "inst": recipe.instance,
        "repo": task.repo,
        "commit": task.base_commit,
    }
    if taskenv_key:  # the task environment's image (swe_gym.taskenv.docker_layers.env_tag)
        key["taskenv"] = taskenv_key
    # Keyed by repository, commit and recipe (not instance id): tasks sharing them share the image.
    return f"swe-gym/testbed.{slug(task.repo.replace('/', '.'))}:{short_hash(key)}"
