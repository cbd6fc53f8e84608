"""A clone that lacks an object outside the base tree (a lost historical commit or blob)
still gives sandboxes and grades: only the base tree is needed, and the sandbox's repository
is shallow where the history stops reading. An object missing from the base tree itself is an
error that says so."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from swe_gym.errors import SandboxError
from swe_gym.grading import grade_patch
from swe_gym.sandbox.local import LocalSandbox
from swe_gym.tasks import normalise_row
from tests.conftest import CALC, CALC_FIXED, TESTS, TESTS_NEW, diff_of, git


def _loose(repo: Path, sha: str) -> Path:
    return repo / ".git" / "objects" / sha[:2] / sha[2:]


def _repo(tmp_path: Path) -> tuple[dict, Path]:
    """Five old commits, then the base; unique content, so no cached pack is reused."""
    repos = tmp_path / "repos"
    repo = repos / "gen__holes"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for i in range(5):
        (repo / "NOTES").write_text(f"{secrets.token_hex(8)} {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"old {i}")
    (repo / "calc.py").write_text(CALC)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc")
    row = {
        "instance_id": "gen__holes-1", "repo": "gen/holes",
        "base_commit": git(repo, "rev-parse", "HEAD").strip(), "problem_statement": "add",
        "patch": diff_of(repo, "calc.py", CALC_FIXED),
        "test_patch": diff_of(repo, "tests/test_calc.py", TESTS_NEW),
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "install_config": {"test_cmd": "python -m pytest -rA -p no:cacheprovider",
                           "env_vars": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}},
    }  # fmt: skip
    return row, repos


@pytest.mark.parametrize("lost", ["first commit", "old blob"])
def test_a_missing_historical_object_is_not_an_error(tmp_path, lost):
    row, repos = _repo(tmp_path)
    repo = repos / "gen__holes"
    sha = git(repo, "rev-list", "--max-parents=0", "HEAD").strip()
    if lost == "old blob":
        sha = git(repo, "rev-parse", "HEAD~3:NOTES").strip()
    os.unlink(_loose(repo, sha))
    task = normalise_row(row)
    with LocalSandbox(task, repos_dir=repos) as sb:
        assert "def add" in sb.run("cat calc.py").output
        log = sb.run("git log --oneline | wc -l; git status --short | wc -l")
        assert log.exit_code == 0
        commits, dirty = (int(x) for x in log.output.split())
        assert 1 <= commits < 6 and dirty == 0  # history cut where it stops reading
        sb.write_file("calc.py", CALC_FIXED)
        assert sb.diff() == row["patch"]
    report = grade_patch(task, row["patch"], sandbox_options={"repos_dir": repos})
    assert report.resolved, report


def test_an_object_missing_from_the_base_tree_is_named(tmp_path):
    row, repos = _repo(tmp_path)
    repo = repos / "gen__holes"
    os.unlink(_loose(repo, git(repo, "rev-parse", "HEAD:calc.py").strip()))
    base = row["base_commit"]
    with pytest.raises(SandboxError, match=f"lacks files of commit {base} \\(missing: calc.py\\)"):
        LocalSandbox(normalise_row(row), repos_dir=repos).start()
