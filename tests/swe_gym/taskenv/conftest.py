"""One toolkit cache for this directory's tests (a temp dir, restored after): environments are
built once per session and shared by the tests; uv's own download cache stays the user's."""

from __future__ import annotations

import pytest

from swe_gym.paths import CACHE_ENV
from tests.swe_gym.taskenv.genrepos import oldpy_repo, shadow_repo


@pytest.fixture(scope="session")
def env_cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("swe_gym_cache"))


@pytest.fixture(autouse=True)
def env_cache(env_cache_dir, monkeypatch) -> str:
    """This directory's tests, and only they, see the shared temp cache (set per test: a
    session-wide variable would leak into whatever test a worker runs next)."""
    monkeypatch.setenv(CACHE_ENV, env_cache_dir)
    return env_cache_dir


@pytest.fixture(scope="session")
def oldpy(env_cache_dir, tmp_path_factory) -> tuple[dict, str]:
    """(row, repos_dir) of the generated ``gen/oldpy`` (Python 3.9, pins, pip install -e .)."""
    repos = tmp_path_factory.mktemp("repos")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, env_cache_dir)
        return oldpy_repo(repos), str(repos)


@pytest.fixture(scope="session")
def shadow(env_cache_dir, tmp_path_factory) -> tuple[dict, str]:
    """(row, repos_dir) of the generated ``gen/cachetools`` (a package the host also has)."""
    repos = tmp_path_factory.mktemp("repos")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, env_cache_dir)
        return shadow_repo(repos), str(repos)
