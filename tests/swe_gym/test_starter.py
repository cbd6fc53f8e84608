"""SWEStarter: deterministic repositories, tasks that validate, and the suite's shape."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pytest

from swe_gym.starter import STARTER_REPOS, build, repo_path, starter_tasks
from swe_gym.starter import _core as core
from swe_gym.tasks import Task, load_tasks

TASKS = starter_tasks()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A fresh SWE_GYM_CACHE for this module, so the tests build the repositories themselves."""
    root = tmp_path_factory.mktemp("swe_gym_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWE_GYM_CACHE", str(root))
        yield root


def _head(path: Path) -> str:
    out = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


# ------------------------------------------------------------------------------ the suite


def test_suite_size_and_spread():
    assert len(TASKS) >= 24
    assert len(STARTER_REPOS) >= 4
    assert {t.repo for t in TASKS} == STARTER_REPOS
    assert len({t.instance_id for t in TASKS}) == len(TASKS)
    kinds = Counter(t.meta["kind"] for t in TASKS)
    assert set(kinds) == {"one-line", "multi-hunk", "multi-file", "feature"}
    assert kinds["feature"] >= 2
    assert {t.meta["difficulty"] for t in TASKS} == {"easy", "medium", "hard"}
    per_repo = Counter(t.repo for t in TASKS)
    assert min(per_repo.values()) >= 5, per_repo


@pytest.mark.parametrize("task", TASKS, ids=[t.instance_id for t in TASKS])
def test_row_follows_the_schema(task: Task):
    owner, name = task.repo.split("/")
    assert owner == "starter" and task.instance_id.startswith(f"starter__{name}-")
    assert len(task.base_commit) == 40 and task.environment_setup_commit == task.base_commit
    assert task.version == "0.1" and task.hints_text == "" and task.license_name == "MIT"
    assert task.install_config == build.INSTALL_CONFIG
    datetime.fromisoformat(task.created_at.replace("Z", "+00:00"))
    assert task.problem_statement.strip()
    assert task.FAIL_TO_PASS and len(task.PASS_TO_PASS) >= 3
    assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
    for test_id in task.FAIL_TO_PASS + task.PASS_TO_PASS:
        # What parse_log_pytest reports: path::name[params], no whitespace.
        assert test_id.startswith("tests/test_") and ".py::test_" in test_id, test_id
        assert not any(c.isspace() for c in test_id), test_id
    assert task.meta["num_modified_files"] == len(task.code_files)


@pytest.mark.parametrize("task", TASKS, ids=[t.instance_id for t in TASKS])
def test_patch_touches_code_and_test_patch_touches_tests(task: Task):
    assert task.code_files and task.test_files
    assert not [p for p in task.code_files if build.is_test_path(p)]
    assert all(build.is_test_path(p) for p in task.test_files)
    assert build.patch_problems(task) == []


def test_patch_problems_flags_misplaced_files():
    task = TASKS[0]
    swapped = dataclasses.replace(task, patch=task.test_patch, test_patch=task.patch)
    problems = build.patch_problems(swapped)
    assert any("patch touches test file" in p for p in problems)
    assert any("test_patch touches non-test file" in p for p in problems)


def test_load_tasks_starter_is_the_bundled_suite():
    assert [t.instance_id for t in load_tasks("starter")] == [t.instance_id for t in TASKS]


# ------------------------------------------------------------------------------ building


def test_build_is_deterministic_and_ignores_user_git_config(tmp_path, monkeypatch):
    # A hostile user setup: CRLF conversion, signing, another identity and branch name,
    # an attributes file that would rewrite line endings, and GIT_* variables.
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text(
        "[core]\n\tautocrlf = true\n[commit]\n\tgpgsign = true\n"
        "[user]\n\tname = Someone Else\n\temail = else@example.com\n[init]\n\tdefaultBranch = trunk\n"
    )
    (home / ".config" / "git" / "attributes").write_text("* text eol=crlf\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Intruder")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-01-01T00:00:00+00:00")
    bases = {t.base_commit for t in TASKS}
    for name in core.repo_names():
        recorded = [c.hash for c in core.load_history(name)]
        first = core.build_repo(name, tmp_path / f"{name}-1")
        second = core.build_repo(name, tmp_path / f"{name}-2")
        assert first == second == recorded
        assert _head(tmp_path / f"{name}-1") == recorded[-1]
        repo_bases = {t.base_commit for t in TASKS if t.repo == core.full_name(name)}
        assert repo_bases <= set(first) and repo_bases
        bases -= repo_bases
    assert not bases


def test_sources_are_package_data():
    # pyproject's package-data patterns are *.txt, *.md, *.json (no dotfiles): a wheel that
    # missed a file would build different hashes.
    stored = [p for p in core.REPOS_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert stored
    odd = [p for p in stored if p.suffix not in (".txt", ".md", ".json") or p.name.startswith(".")]
    assert not odd
    assert core.stored_to_repo_path("a/dot_github/dot_gitignore.txt") == "a/.github/.gitignore"
    assert core.stored_to_repo_path("pkg/mod.py.txt") == "pkg/mod.py"
    assert core.stored_to_repo_path("README.md") == "README.md"


def test_tasks_jsonl_matches_the_task_folders(tmp_path):
    commits = {name: {c.dir: c.hash for c in core.load_history(name)} for name in core.repo_names()}
    rows = {r["instance_id"]: r for r in core.read_tasks_file()}
    dirs = build.task_dirs()
    assert sorted(d.name for d in dirs) == sorted(rows)
    for d in dirs:
        expected = build.source_row(d, commits)
        got = dict(rows[d.name])
        got["PASS_TO_PASS"] = []  # derived by running the tests; checked below
        assert got == expected, d.name


def test_repo_path_builds_once_into_the_cache(cache):
    path = repo_path("starter/textkit")
    assert path == cache / "repos" / "textkit"
    assert _head(path) == core.expected_head("textkit")
    assert (path / "textkit" / "wrap.py").is_file()  # a working tree, not a bare repository
    marker = path / ".git" / "untouched"
    marker.write_text("")
    assert core.ensure_repo("textkit") == path
    assert marker.exists()  # valid cache: not rebuilt
    assert not [p for p in (cache / "repos").iterdir() if p.name.startswith((".tmp-", ".trash-"))]


def test_corrupt_cache_is_rebuilt(cache):
    path = core.ensure_repo("durations")
    (path / ".git" / "refs" / "heads" / "main").write_text("0" * 40 + "\n")
    (path / ".git" / "packed-refs").unlink(missing_ok=True)
    assert not core.is_valid_cache(path, "durations", core.expected_head("durations"))
    assert core.ensure_repo("durations") == path
    assert _head(path) == core.expected_head("durations")

    # A repository with the right head but a missing base commit is not accepted either.
    assert not core.is_valid_cache(path, "durations", core.expected_head("durations"), ["1" * 40])


def test_concurrent_first_use_is_safe(tmp_path):
    code = "import sys; from swe_gym.starter import repo_path; print(repo_path(sys.argv[1]))"
    env = dict(os.environ, SWE_GYM_CACHE=str(tmp_path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, "starter/tinystats"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert paths == {str(tmp_path / "repos" / "tinystats")}
    assert _head(Path(paths.pop())) == core.expected_head("tinystats")
    assert sorted(p.name for p in (tmp_path / "repos").iterdir()) == [
        ".tinystats.lock",
        "tinystats",
    ]


def test_unknown_repo_names_the_accepted_ones():
    with pytest.raises(KeyError, match="starter/textkit") as info:
        repo_path("starter/textkt")
    assert "unknown starter repo 'starter/textkt'" in str(info.value)
    with pytest.raises(KeyError):
        repo_path("textkit")  # the short name is not a Task.repo value


# ---------------------------------------------------------------------------- validation


@pytest.mark.slow  # about 16 s: every bundled task's tests, twice
def test_every_task_validates(cache, tmp_path):
    # Two at a time: each task is two short pytest runs in subprocesses.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda t: build.validate_task_plain(t, tmp_path), TASKS))
    failed = {r.instance_id: r.problems for r in results if not r.ok}
    assert not failed, json.dumps(failed, indent=1)[:4000]
    for task, res in zip(TASKS, results, strict=True):
        # The recorded lists are exactly what the runs show.
        assert res.flipped() == sorted(task.FAIL_TO_PASS), task.instance_id
        assert res.kept() == sorted(task.PASS_TO_PASS), task.instance_id
    assert not list(tmp_path.iterdir())  # the clones are cleaned up


def test_validation_reports_a_wrong_task(cache, tmp_path):
    task = TASKS[0]
    wrong = dataclasses.replace(
        task,
        FAIL_TO_PASS=[task.PASS_TO_PASS[0]],
        PASS_TO_PASS=[*task.FAIL_TO_PASS, "tests/test_nowhere.py::test_missing"],
    )
    res = build.validate_task_plain(wrong, tmp_path)
    assert not res.ok
    text = "\n".join(res.problems)
    assert f"FAIL_TO_PASS {task.PASS_TO_PASS[0]} already passes before" in text
    assert f"PASS_TO_PASS {task.FAIL_TO_PASS[0]} is FAILED before" in text
    assert "PASS_TO_PASS tests/test_nowhere.py::test_missing is missing before" in text


def test_gold_patch_that_does_not_apply_is_reported(cache, tmp_path):
    task = TASKS[0]
    broken = dataclasses.replace(task, patch=task.patch.replace("\n-", "\n-XX", 1))
    res = build.validate_task_plain(broken, tmp_path)
    assert any(p.startswith("patch does not apply") for p in res.problems), res.problems


def test_build_check_cli_passes_for_a_task(cache, capsys):
    assert build.main(["--check", "--task", "starter__textkit-1"]) == 0
    out = capsys.readouterr().out
    assert "ok   starter__textkit-1" in out
    for name in core.repo_names():
        assert f"{name:12s}" in out
