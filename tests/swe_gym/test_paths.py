"""One cache root for every part that keeps files between runs."""

from __future__ import annotations

from pathlib import Path

from agents.models import smollm2
from swe_gym import paths
from swe_gym.images import base as image_base
from swe_gym.starter import _core as starter_core


def test_every_cache_follows_the_env_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "c"))
    assert (
        image_base.cache_dir() == starter_core.cache_root() == smollm2.cache_dir() == tmp_path / "c"
    )


def test_default_cache_is_under_home_not_the_working_directory(tmp_path, monkeypatch):
    # A 291 MB base-image tarball once landed in the current directory's .cache.
    monkeypatch.delenv(paths.CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    root = image_base.cache_dir()
    assert root == tmp_path / "home" / ".cache" / "swe_gym"
    assert (
        Path.cwd() not in root.parents and Path(__file__).resolve().parents[2] not in root.parents
    )
