"""Acceptance on the whole bundled suite, through the env's own tools (local backend)."""

import posixpath
import re
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import swe_gym  # noqa: F401
from swe_gym.oracle import oracle_actions
from swe_gym.starter import starter_tasks
from swe_gym.validate import main as validate_main

TASKS = starter_tasks()


def _episode(task, actions):
    with gym.make("SWEStarter-v0", max_turns=len(actions) + 5) as env:
        env.reset(options={"task_id": task.instance_id})
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            assert not info["invalid_action"], obs
            if terminated or truncated:
                return reward, info
    raise AssertionError("the episode did not end")


def _breaker(task) -> str:
    """Library code that fails the first P2P test: the agent's patch breaks a passing test.

    Test-infrastructure edits (a conftest hook) are reverted before grading, so the break lives
    in the package itself, which the tests import; it patches the runner at import time."""
    victim = task.PASS_TO_PASS[0]
    package = next(
        p for p in re.findall(r"^diff --git a/(\S+)", task.patch, re.M) if p.endswith(".py")
    )
    init = posixpath.join(posixpath.dirname(package), "__init__.py")
    hook = (
        "\nimport _pytest.python as _pp\n_orig = _pp.Function.runtest\n\n\n"
        "def _runtest(self):\n"
        f"    if self.nodeid == {victim!r}:\n        raise AssertionError('broken')\n"
        "    return _orig(self)\n\n\n_pp.Function.runtest = _runtest\n"
    )
    return f"```\ncat >> {init} <<'EOF'\n{hook}EOF\n```"


def _check(task):
    oracle = oracle_actions(task)
    reward, info = _episode(task, oracle)
    assert reward == 1.0, (task.instance_id, info["report"])
    reward, info = _episode(task, ["```\nsubmit\n```"])
    assert reward == 0.0 and set(info["report"]["f2p_failed"]) == set(task.FAIL_TO_PASS), (
        task.instance_id
    )
    reward, info = _episode(task, oracle[:-1] + [_breaker(task), "```\nsubmit\n```"])
    assert reward == 0.0, task.instance_id
    assert (
        info["report"]["p2p_failed"] == [task.PASS_TO_PASS[0]] and not info["report"]["f2p_failed"]
    ), info["report"]
    return task.instance_id


def test_suite_shape():
    assert len(TASKS) >= 24
    assert len({t.repo for t in TASKS}) >= 4
    assert all(t.PASS_TO_PASS for t in TASKS)


@pytest.mark.slow  # three graded episodes per bundled task
def test_oracle_one_empty_zero_broken_p2p_zero_for_every_task():
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(_check, TASKS))
    assert done == [t.instance_id for t in TASKS]


@pytest.mark.slow  # every bundled task graded twice (empty patch, gold patch)
def test_validator_passes_on_the_bundled_suite(capsys):
    assert validate_main(["--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{len(TASKS)} passed, 0 failed" in out


def test_validator_fails_on_a_broken_gold_patch(capsys):
    task = TASKS[0].to_dict()
    # A gold patch whose old lines are not in the file: no fallback (git apply, --reject,
    # patch --fuzz) can apply it.
    path = task["patch"].split(" b/", 1)[1].split("\n", 1)[0]
    task["patch"] = (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        "@@ -1,2 +1,2 @@\n-no such line one\n-no such line two\n+x\n+y\n"
    )
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.write(json.dumps(task) + "\n")
        f.flush()
        assert validate_main([f.name, "--jobs", "1"]) == 1
    assert "gold patch does not resolve: model_patch_failed" in capsys.readouterr().out
