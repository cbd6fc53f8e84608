"""SWEStarter: a small bundled task suite over pure-Python repositories written for it.

Each repository's history lives in this package as plain files (``repos/<name>/``); the first
``repo_path`` call builds it deterministically into ``$SWE_GYM_CACHE/repos/<name>`` (default
``~/.cache/swe_gym``), so ``base_commit`` is a real commit with the same hash on every machine.
Tasks are in ``tasks.jsonl`` (SWE-rebench schema), compiled from ``tasks/<instance_id>/`` by
``python -m swe_gym.starter.build``. Importing this package builds nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path

from swe_gym.starter._core import (
    TASKS_FILE,
    cache_root,
    ensure_repo,
    full_name,
    read_tasks_file,
    repo_names,
    short_name,
)
from swe_gym.tasks import Task, normalise_row

STARTER_REPOS: frozenset[str] = frozenset(full_name(n) for n in repo_names())


@functools.cache
def _rows() -> tuple[dict, ...]:
    return tuple(read_tasks_file(TASKS_FILE))


def starter_tasks() -> list[Task]:
    """The bundled tasks, in file order (by repository, then number)."""
    return [normalise_row(r) for r in _rows()]


_verified: dict[tuple[str, str], Path] = {}


def repo_path(repo: str) -> Path:
    """The local git repository (working tree) holding every base commit of ``repo``.

    Builds it on first use and rebuilds it if the cached copy is missing or not the recorded
    history. ``repo`` is a ``Task.repo`` value such as ``"starter/textkit"``; an unknown name
    raises ``KeyError`` listing the accepted ones.
    """
    name = short_name(repo)
    key = (str(cache_root()), name)
    path = _verified.get(key)
    if path is not None and path.is_dir():
        return path
    bases = sorted({r["base_commit"] for r in _rows() if r["repo"] == repo})
    path = ensure_repo(name, bases)
    _verified[key] = path
    return path


__all__ = ["STARTER_REPOS", "repo_path", "starter_tasks"]
