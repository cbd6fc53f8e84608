"""A row's environment built from its recipe and what the local sandbox then sees, on the
generated ``gen/oldpy`` (Python 3.9 only, pytest pinned to 7.4.4 while the host has a newer
one, ``inflection`` the host lacks, tests that need the ``pip install -e .`` metadata and the
``_version.py`` it generates). Needs PyPI for the first build (seconds, tiny packages); one
temp toolkit cache for the session (``conftest.env_cache``)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from swe_gym import taskenv
from swe_gym.grading import grade_patch
from swe_gym.sandbox.local import LocalSandbox
from swe_gym.starter import starter_tasks
from swe_gym.taskenv.build import ensure
from swe_gym.taskenv.recipe import Recipe
from swe_gym.tasks import normalise_row


def test_the_rows_environment_grades_as_the_row_needs(oldpy):
    row, repos = oldpy
    task = normalise_row(row)
    opts = {"repos_dir": repos}
    empty = grade_patch(task, "", sandbox_options=opts)
    assert empty.reason == "tests_failed" and empty.f2p_failed == row["FAIL_TO_PASS"]
    assert not empty.p2p_failed  # 3.9, the pinned pytest, the editable install's files
    gold = grade_patch(task, row["patch"], sandbox_options=opts)
    assert gold.resolved, gold
    # the host's interpreter cannot even import the package (collections.Mapping, 3.10+)
    host = grade_patch(task, row["patch"], sandbox_options={**opts, "environment": "host"})
    assert not host.resolved


def test_a_package_the_host_also_has_is_tested_from_the_tree(shadow):
    """The host's fixed copy made the empty patch pass (a false 1.0); the environment's
    editable install tests the tree's copy."""
    row, repos = shadow
    task, opts = normalise_row(row), {"repos_dir": repos}
    host = grade_patch(task, "", sandbox_options={**opts, "environment": "host"})
    assert host.resolved  # the failure this guards against
    assert grade_patch(task, "", sandbox_options=opts).f2p_failed == row["FAIL_TO_PASS"]
    assert grade_patch(task, row["patch"], sandbox_options=opts).resolved


def test_the_sandbox_sees_only_the_environment(oldpy):
    row, repos = oldpy
    with LocalSandbox(normalise_row(row), repos_dir=repos) as sb:
        env = sb.task_env
        assert env is not None and env.manifest["python"].startswith("3.9.")
        out = sb.run(
            "command -v python pytest; python -c 'import sys; print(sys.version_info[:2])'"
        )
        assert out.output.split() == [
            f"{env.venv}/bin/python",
            f"{env.venv}/bin/pytest",
            "(3,",
            "9)",
        ]
        # the host's site-packages and plugins are not there, nor its other interpreters
        assert sb.run("python -c 'import swebench'").exit_code != 0
        assert sb.run(f"ls {sys.base_prefix}/lib").exit_code != 0
        base_site = env.base_site_packages()[0]  # the 3.9 interpreter's own: empty here
        assert sb.run(f"ls -A {base_site} | wc -l").output.strip() == "0"
        assert sb.run("pytest --version").output.strip().endswith("7.4.4")
        # the install step's generated file is in the tree, outside git status and the diff
        assert sb.run("cat oldpy/_version.py; git status --short").output == "version = '0.1'\n"
        sb.write_file("oldpy/new.py", "x = 1\n")
        assert "_version" not in sb.diff() and "oldpy/new.py" in sb.diff()


def test_the_environment_is_cached_by_recipe_and_reused_by_other_processes(oldpy):
    row, repos = oldpy
    task = normalise_row(row)
    first = taskenv.resolve(task, repos_dir=repos)
    other = normalise_row({**row, "instance_id": "gen__oldpy-2"})
    assert taskenv.resolve(other, repos_dir=repos).root == first.root  # key: the recipe
    code = (
        "import json, sys; from swe_gym import taskenv; from swe_gym.tasks import normalise_row;"
        "e = taskenv.resolve(normalise_row(json.loads(sys.argv[1])), repos_dir=sys.argv[2]);"
        "print(e.built_now, e.root)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(row), repos],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["False", str(first.root)]


def test_concurrent_builders_build_once(env_cache):
    recipe = Recipe("install_config", python="3.12", packages=["inflection==0.5.1"])
    got: list = []
    threads = [
        threading.Thread(target=lambda: got.append(ensure(recipe, label="t"))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(e.built_now for e in got) == 1 and len({e.root for e in got}) == 1
    assert subprocess.run([f"{got[0].venv}/bin/python", "-c", "import inflection"]).returncode == 0


def test_a_python_the_machine_lacks_is_a_report_naming_it(oldpy):
    row, repos = oldpy
    row = {**row, "install_config": {**row["install_config"], "python": "3.99"}}
    report = grade_patch(normalise_row(row), row["patch"], sandbox_options={"repos_dir": repos})
    assert report.reason == "grading_error"
    assert "no Python 3.99" in report.detail and "allow_nearest_python" in report.detail


def test_starter_tasks_keep_the_host_interpreter_and_stay_fast():
    task = starter_tasks()[0]
    with LocalSandbox(task) as sb:
        assert sb.task_env is None and sb.env_seconds < 1.0
        assert sb.run("python -c 'import pytest'").exit_code == 0


def test_task_policy_without_a_recipe_says_so(mini_repo):
    row, repos = mini_repo
    with pytest.raises(taskenv.EnvBuildError, match="no recipe"):
        taskenv.resolve(normalise_row({**row, "install_config": None}), "task", repos)


def test_resolution_is_dated_and_a_newer_pin_wins_with_a_note(env_cache):
    dated = ensure(
        Recipe(
            "install_config", python="3.12", packages=["inflection"], exclude_newer="2020-07-01"
        ),
        label="dated",
    )
    out = subprocess.run(
        [
            f"{dated.venv}/bin/python",
            "-c",
            "import importlib.metadata as m; print(m.version('inflection'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "0.5.0"  # the newest release before the date (0.5.1 came later)
    pinned = ensure(
        Recipe(
            "install_config",
            python="3.12",
            packages=["inflection==0.5.1"],
            exclude_newer="2020-07-01",
        ),
        label="pinned",
    )
    assert "--exclude-newer 2020-07-01 dropped" in pinned.manifest["note"]


def test_gym_make_on_a_published_shaped_row(oldpy, tmp_path):
    """The README's path: a rows file and clones, gym.make, the row's own Python in the
    agent's shell, the gold fix submitted pays 1.0."""
    import gymnasium as gym

    import swe_gym  # noqa: F401

    row, repos = oldpy
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    with gym.make(
        "SWERebench-v0",
        tasks=str(rows),
        backend="local",
        sandbox_options={"repos_dir": repos},
        max_turns=5,
    ) as env:
        env.reset(seed=0)
        obs, *_ = env.step("```\npython --version\n```")
        assert obs.startswith("Python 3.9.")
        obs, *_ = env.step(
            f"```\ncat > /tmp/fix.diff <<'EOF'\n{row['patch']}EOF\ngit apply /tmp/fix.diff\n```"
        )
        _, reward, terminated, _, info = env.step("```\nsubmit\n```")
    assert terminated and reward == 1.0, info
