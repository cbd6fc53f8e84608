"""Rows made by ``swe_gym.synth`` load with no extra option: the derived repository is found in
the row's own ``repos_dir``, or in the cache folder synth writes to by default."""

from __future__ import annotations

import subprocess

from swe_gym.repos import SYNTH_REPOS, local_repo
from swe_gym.sandbox.docker import DockerSandbox
from swe_gym.sandbox.local import LocalSandbox
from swe_gym.tasks import normalise_row


def _repo(path):
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def test_the_default_synth_folder_is_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("SWE_GYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SWE_GYM_REPOS", raising=False)
    repo = _repo(tmp_path / "cache" / SYNTH_REPOS / "synth__lib")
    assert local_repo("synth/lib") == repo.resolve()
    assert local_repo("synth/lib", tmp_path / "elsewhere") == repo.resolve()  # after repos_dir


def test_a_rows_own_repos_dir_serves_when_the_sandbox_has_none(tmp_path):
    row = {"instance_id": "synth__lib-1", "repo": "synth/lib", "base_commit": "a" * 40,
           "problem_statement": "x", "patch": "", "test_patch": "", "FAIL_TO_PASS": ["t::a"],
           "repos_dir": str(tmp_path / "repos")}  # fmt: skip
    task = normalise_row(row)
    assert LocalSandbox(task).repos_dir == str(tmp_path / "repos")
    assert DockerSandbox(task).repos_dir == str(tmp_path / "repos")
    assert LocalSandbox(task, repos_dir="/given").repos_dir == "/given"
