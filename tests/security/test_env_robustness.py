"""Red team at the env level: a scripted hostile agent drives a real ``SWEStarter-v0`` env (the
``mini_repo`` task, local backend) and each case asserts what the user relies on: ``env.step``
does not raise, the observation says what happened, and the info flags and reward are right.

Pathological inputs carry a generous ``timeout``: they take well under a second when parsing is
linear and hang (fail) only if it turns super-linear again. No wall time is asserted.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

import envs.swe_env as swe_env_module
import swe_gym  # noqa: F401  (registers the ids)
from swe_gym.grading import GradingReport


@pytest.fixture
def make_env(mini_repo):
    row, repos = mini_repo
    made = []

    def make(**kw):
        kw.setdefault("tasks", [row])
        kw.setdefault("sandbox_options", {"repos_dir": str(repos)})
        env = gym.make("SWEStarter-v0", **kw)
        made.append(env)
        env.reset(seed=0)
        return env

    yield make
    for env in made:
        env.close()


def fenced(cmd: str) -> str:
    return f"```\n{cmd}\n```"


def editor(*words: str, text: str | None = None) -> str:
    line = " ".join(("str_replace_editor", *words))
    return fenced(line if text is None else f"{line}\n{text}")


def assert_running(step):
    obs, reward, terminated, truncated, info = step
    assert not terminated and not truncated and reward == 0.0, obs
    assert obs.rstrip().splitlines()[-1].startswith("(Current directory: "), obs
    obs.encode("utf-8")  # every observation is valid UTF-8
    return obs, info


def test_editor_errors_are_observations(make_env):
    env = make_env()
    env.step(fenced("ln -s /etc/passwd pw; ln -s / root; mkfifo fifo; mkdir d"))
    actions = [
        editor("view", "pw"),
        editor("view", "root/etc/passwd"),
        editor(
            "str_replace",
            "root/etc/hostname",
            text="<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE",
        ),
        editor("create", "root/tmp/x.py", text="x = 1"),
        editor("view", "fifo"),
        editor("insert", "d", "0", text="x"),
        editor("view", "/etc/shadow"),
        '<tool_call>{"name": "str_replace_editor", "arguments": {"command": "create", '
        '"path": "s.py", "file_text": "\\ud800"}}</tool_call>',
    ]
    for i, action in enumerate(actions):
        fmt = "json" if action.startswith("<tool_call>") else "fenced"
        env.unwrapped.action_format = fmt
        obs, info = assert_running(env.step(action))
        assert obs.startswith("ERROR"), (i, obs)
        assert "root:x:0" not in obs and not info["invalid_action"]
        assert "(Open file: n/a)" in obs  # a failed open is not an open file
    env.unwrapped.action_format = "fenced"
    obs, _ = assert_running(env.step(fenced("echo alive")))
    assert "alive" in obs


def test_viewing_a_directory_does_not_move_the_shell(make_env):
    env = make_env()
    env.step(fenced("cd tests"))
    for action in (
        editor("view", "/testbed"),
        editor("view", "/testbed/tests"),
        editor("view", "calc.py"),
    ):
        obs, _ = assert_running(env.step(action))
        assert obs.rstrip().endswith("(Current directory: /testbed/tests)"), obs
    obs, _ = assert_running(env.step(fenced("pwd")))
    assert obs.splitlines()[0] == "/testbed/tests"


def test_a_dead_sandbox_ends_the_episode_with_a_reason(make_env):
    env = make_env()
    env.unwrapped.sandbox.close()  # the container was killed under the env
    obs, reward, terminated, truncated, info = env.step(fenced("ls"))
    assert truncated and not terminated and reward == 0.0
    assert info["end_reason"] == "sandbox_failed" and info["error"]
    assert "sandbox failed" in obs
    with pytest.raises(ResetNeeded):  # API misuse may raise
        env.step(fenced("ls"))
    env.reset(seed=0)
    obs, _ = assert_running(env.step(fenced("echo back")))
    assert "back" in obs


def test_a_dead_sandbox_under_the_editor_ends_the_episode(make_env):
    env = make_env()
    env.unwrapped.sandbox.close()
    *_, truncated, info = env.step(editor("view", "calc.py"))
    assert truncated and info["end_reason"] == "sandbox_failed"


@pytest.mark.parametrize(
    ("cmd", "restarts"),
    [
        ("exit", True),
        ("kill -9 $$", True),
        ("set -e; false", True),
        ("kill -9 -1", False),  # refused inside the sandbox
        ("exec 0</dev/null", False),  # the shell keeps its own stdin
        ("exec >/dev/null 2>&1", False),  # the session restores stdout
    ],
)
def test_killing_the_shell_is_an_observation(make_env, cmd, restarts):
    env = make_env()
    obs, _ = assert_running(env.step(fenced(cmd)))
    assert ("new shell" in obs) == restarts, obs
    obs, _ = assert_running(env.step(fenced("echo alive")))
    assert "alive" in obs


def _fail(*a, **k):
    raise RuntimeError("grader exploded")


def _no_verdict(task, patch, **k):
    return GradingReport(task.instance_id, resolved=False, reason="grading_error", detail="no log")


@pytest.mark.parametrize("grader", [_fail, _no_verdict])
@pytest.mark.parametrize("last_turn", [False, True])
def test_a_grading_failure_is_a_truncated_end_with_a_reason(
    make_env, monkeypatch, grader, last_turn
):
    monkeypatch.setattr(swe_env_module, "grade_patch", grader)
    env = make_env(max_turns=1 if last_turn else 5)
    action = fenced("echo hi") if last_turn else fenced("submit")
    obs, reward, terminated, truncated, info = env.step(action)
    assert truncated and not terminated and reward == 0.0 and not info["resolved"]
    assert info["end_reason"] == "grading_error"
    assert ("grader exploded" if grader is _fail else "no log") in info["error"]


def test_a_failing_diff_on_submit_is_a_truncated_end(make_env, monkeypatch):
    env = make_env()

    def broken_diff():
        raise OSError("diff failed")

    monkeypatch.setattr(env.unwrapped.sandbox, "diff", broken_diff)
    *_, reward, terminated, truncated, info = env.step(fenced("submit"))
    assert truncated and not terminated and reward == 0.0
    assert info["end_reason"] == "sandbox_failed" and "diff failed" in info["error"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "cmd",
    [
        "while :; do printf x; sleep 1; done",  # slow loris, inside the shell itself
        "python3 -c \"import time,sys\nwhile 1: sys.stdout.write('x'); sys.stdout.flush(); time.sleep(1)\"",
        "tr '\\0' x < /dev/zero",  # one endless line
        "yes",
    ],
)
def test_endless_output_ends_at_the_timeout_with_a_bounded_observation(make_env, cmd):
    env = make_env(command_timeout=2)
    obs, _ = assert_running(env.step(fenced(cmd)))
    assert "timed out after 2 s" in obs and len(obs) < 40_000
    obs, _ = assert_running(env.step(fenced("echo alive")))
    assert "alive" in obs


@pytest.mark.slow  # about 16 s: a dozen pathological commands, each to its timeout
@pytest.mark.timeout(300)
def test_pathological_actions_are_answered(make_env):
    env = make_env(command_timeout=5)
    five_mb = 5_000_000
    cases = [
        ("`" * 200_000, "no_command"),
        ("```\n" * (five_mb // 4), "multiple_commands"),
        ("````\n```\nls\n```\n````\n" + "~~~~ not closed\n" * 1000, None),  # nested: one block
        ("```x\n" * (five_mb // 5) + "```\necho ok\n```", None),
        ("think " * (five_mb // 6) + "\n" + fenced("echo ok"), None),
        (fenced("str_replace_editor view " + "'" * five_mb), "bad_arguments"),
    ]
    for action, reason in cases:
        obs, reward, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated) and reward == 0.0
        assert info["invalid_reason"] == reason, obs[:300]
    # Huge commands reach bash (which may give up on them): an observation either way.
    for cmd in ("$(" * (five_mb // 2), "echo " + "'\"" * (five_mb // 2)):
        assert_running(env.step(fenced(cmd)))


def test_text_that_is_not_unicode_is_an_observation(make_env):
    env = make_env(action_format="json")
    call = {"name": "bash", "arguments": {"command": "echo '\ud800' caf\udce9; printf '\\xff\\n'"}}
    obs, info = assert_running(env.step("<tool_call>" + json.dumps(call) + "</tool_call>"))
    assert not info["invalid_action"] and "caf" in obs


def test_huge_editor_outputs_are_bounded(make_env):
    env = make_env()
    env.step(fenced("python3 -c \"open('big.py','w').write('y = 0\\n' * 300000)\""))
    search = "<<<<<<< SEARCH\n" + "z" * 2_000_000 + "\n=======\n\n>>>>>>> REPLACE"
    obs, _ = assert_running(env.step(editor("str_replace", "big.py", text=search)))
    assert obs.startswith("ERROR") and len(obs) < 10_000
    obs, _ = assert_running(env.step(editor("view", "big.py")))
    assert "<response clipped" in obs and len(obs) < 20_000
