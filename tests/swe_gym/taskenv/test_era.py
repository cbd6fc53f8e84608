"""Environments built as of the row's date and installed where SWE-bench installs, one
generated repository per failure class of older published rows (``erarepos``); each also
shows the failure the fix removes. Needs PyPI for the first builds (tiny packages)."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from swe_gym import taskenv
from swe_gym.grading import grade_patch
from swe_gym.taskenv import overrides
from swe_gym.tasks import normalise_row
from tests.swe_gym.taskenv.erarepos import moved_repo, oldsetup_repo, pkgres_repo


@pytest.fixture
def repos(tmp_path):
    return tmp_path / "repos"


def _override(monkeypatch, tmp_path, table: dict) -> None:
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv(overrides.OVERRIDES_ENV, str(path))
    overrides.clear_cache()
    taskenv._RECIPES.clear()


def test_seeds_are_the_dates_and_pkg_resources_is_there(repos):
    row = pkgres_repo(repos)
    task, opts = normalise_row(row), {"repos_dir": str(repos)}
    env = taskenv.resolve(task, "task", repos)
    seeds = env.manifest["seeds"]
    assert env.manifest["seed_cut"] == "2023-06-01"
    assert Version(seeds["setuptools"]) < Version("68") and Version(seeds["pip"]) < Version("23.2")
    assert "seeds: pip==" in (env.root / "build.log").read_text()
    assert grade_patch(task, row["patch"], sandbox_options=opts).resolved
    # undated (no setup commit, no created_at), the seeds are today's: no pkg_resources
    undated = normalise_row({**row, "created_at": "", "environment_setup_commit": ""})
    env_now = taskenv.resolve(undated, "task", repos)
    assert Version(env_now.manifest["seeds"]["setuptools"]) >= Version("81")
    report = grade_patch(undated, row["patch"], sandbox_options=opts)
    assert not report.resolved and report.p2p_failed == row["PASS_TO_PASS"]


def test_an_old_editable_install_gets_an_era_pip_and_era_build_dependencies(
    repos, tmp_path, monkeypatch
):
    row = oldsetup_repo(repos)
    task = normalise_row(row)
    env = taskenv.resolve(task, "task", repos)
    assert Version(env.manifest["seeds"]["pip"]) < Version("21.2")
    pins = dict(x.split("==") for x in env.manifest["build_constraints"])
    assert Version(pins["setuptools"]) < Version("58") and "setuptools-scm" in pins
    assert grade_patch(task, row["patch"], sandbox_options={"repos_dir": str(repos)}).resolved
    # the build dependencies floating: today's setuptools turns `setup.py develop` into a PEP
    # 660 `pip install --use-pep517`, which the era's pip cannot do
    _override(monkeypatch, tmp_path, {"gen/oldsetup": {"build_constraints": False}})
    with pytest.raises(taskenv.EnvBuildError, match="the install step"):
        taskenv.resolve(task, "task", repos)
    floating = taskenv.task_recipe(task, repos)
    failed = (taskenv.envs_root() / f"{floating.key}.failed.log").read_text()
    assert "develop command is deprecated" in failed and "'--use-pep517'" in failed


def test_the_install_runs_at_the_base_commit(repos, tmp_path, monkeypatch):
    row = moved_repo(repos)
    task, opts = normalise_row(row), {"repos_dir": str(repos)}
    env = taskenv.resolve(task, "task", repos)
    assert env.manifest["install_commit"] == row["base_commit"] != row["environment_setup_commit"]
    assert grade_patch(task, row["patch"], sandbox_options=opts).resolved
    # installed at the setup commit (which dropped the dependency), the base tree cannot import
    _override(monkeypatch, tmp_path, {"gen/moved@1.0": {"install_at": "setup"}})
    at_setup = taskenv.resolve(task, "task", repos)
    assert at_setup.key != env.key
    assert at_setup.manifest["install_commit"] == row["environment_setup_commit"]
    report = grade_patch(task, row["patch"], sandbox_options=opts)
    assert not report.resolved and report.p2p_failed == row["PASS_TO_PASS"]


@pytest.mark.docker
@pytest.mark.slow  # the first environment image copies an interpreter
def test_docker_grades_on_the_same_era_environment(docker_client, repos):
    """The Docker backend copies the host-built environment in: the era's setuptools (with
    ``pkg_resources``) is what the row's tests import there too."""
    row = pkgres_repo(repos)
    task, opts = normalise_row(row), {"repos_dir": str(repos), "pull_policy": "never"}
    empty = grade_patch(task, "", backend="docker", sandbox_options=opts)
    assert empty.f2p_failed == row["FAIL_TO_PASS"] and not empty.p2p_failed, empty
    assert grade_patch(task, row["patch"], backend="docker", sandbox_options=opts).resolved
