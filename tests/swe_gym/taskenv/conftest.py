"""One toolkit cache for this directory's tests (a temp dir, restored after): environments are
built once per session and shared by the tests; uv's own download cache stays the user's."""

from __future__ import annotations

import os

import pytest

from swe_gym.paths import CACHE_ENV
from tests.swe_gym.taskenv.genrepos import oldpy_repo, shadow_repo


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory):
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("swe_gym_cache"))
    yield os.environ[CACHE_ENV]
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(scope="session")
def oldpy(env_cache, tmp_path_factory) -> tuple[dict, str]:
    """(row, repos_dir) of the generated ``gen/oldpy`` (Python 3.9, pins, pip install -e .)."""
    repos = tmp_path_factory.mktemp("repos")
    return oldpy_repo(repos), str(repos)


@pytest.fixture(scope="session")
def shadow(env_cache, tmp_path_factory) -> tuple[dict, str]:
    """(row, repos_dir) of the generated ``gen/cachetools`` (a package the host also has)."""
    repos = tmp_path_factory.mktemp("repos")
    return shadow_repo(repos), str(repos)
