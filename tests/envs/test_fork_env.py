"""``SWEEnv.fork(n)`` and ``fork_env``: children at the parent's step, on sandboxes of their own,
with the branch in their info, each graded on its own; the errors."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import OrderEnforcing, TimeLimit

from envs.fork import fork_env
from envs.prompted import PromptStyle
from envs.swe_env import SWEEnv
from swe_gym.sandbox.fork import ForkUnsupported
from swe_gym.tools.parsing import ToolCall, format_action

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def bash(cmd: str) -> str:
    return format_action(ToolCall("bash", {"command": cmd}), "fenced")


def edit(**args) -> str:
    return format_action(ToolCall("str_replace_editor", args), "fenced")


SUBMIT = format_action(ToolCall("submit"), "fenced")
FIX = edit(
    command="str_replace",
    path="calc.py",
    old_str="def add(a, b):\n    return a - b",
    new_str="def add(a, b):\n    return a + b",
)


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "docker":
        request.getfixturevalue("docker_client")  # a failure under CI=true without a daemon
    return request.param


@pytest.fixture
def make_env(mini_repo, backend):
    """A plain ``SWEEnv`` on the mini task; it and every env forked from it closed after."""
    row, repos = mini_repo
    # the host's pytest plugins off: seconds per grading, nothing of the test here
    cfg = {**row["install_config"], "env_vars": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}
    row = {**row, "install_config": cfg}
    made: list = []

    def make(**kw):
        opts = {"repos_dir": str(repos)}
        env = SWEEnv(tasks=[row], backend=backend, sandbox_options=opts, **kw)
        made.append(env)
        return env

    yield make, made
    for env in made:
        env.close()


def test_fork_branches_at_the_step_and_each_child_is_graded_on_its_own(make_env):
    make, made = make_env
    env = make(max_turns=10)
    _, info = env.reset(seed=0)
    root = env.episode_id
    assert root and info["parent_episode_id"] is None and info["branch_turn"] is None
    env.step(bash("mkdir -p notes && cd notes && export STEP=one"))
    obs, *_ = env.step(edit(command="create", path="/testbed/notes/a.txt", file_text="v1\n"))
    env.step(edit(command="str_replace", path="/testbed/notes/a.txt", old_str="v1", new_str="v2"))
    kids = env.fork(2)
    made.extend(kids)
    for kid in kids:
        assert kid.turn == env.turn == 3 and kid.task is env.task
        assert kid.sandbox is not env.sandbox and kid.render() is None
        assert kid._last_obs == env._last_obs and kid.max_turns == env.max_turns
    good, bad = kids
    obs, reward, term, trunc, info = good.step(bash('echo "$STEP"; pwd'))
    assert obs.startswith("one\n/testbed/notes") and "(Open file: /testbed/notes/a.txt)" in obs
    assert info["turn"] == 4 and info["parent_episode_id"] == root and info["branch_turn"] == 3
    assert good.episode_id not in (root, None, bad.episode_id)
    # the editor's undo history came along, and undoing in one child touches no one else
    obs, *_ = bad.step(edit(command="undo_edit", path="/testbed/notes/a.txt"))
    assert "undone" in obs and bad.sandbox.read_file("notes/a.txt") == b"v1\n"
    assert good.sandbox.read_file("notes/a.txt") == env.sandbox.read_file("notes/a.txt") == b"v2\n"
    # each child submits on its own: the fixed one resolves, the other does not
    obs, *_ = good.step(FIX)
    assert "has been edited" in obs, obs
    *_, reward, term, _, info = good.step(SUBMIT)
    assert term and reward == 1.0 and info["resolved"], (info["report"], info["patch"])
    assert "return a + b" in info["patch"]
    *_, reward, term, _, info = bad.step(SUBMIT)
    assert term and reward == 0.0 and not info["resolved"] and "return a + b" not in info["patch"]
    assert info["parent_episode_id"] == root and info["branch_turn"] == 3
    # the parent is where it was, and goes on
    obs, _, term, _, info = env.step(bash("pwd; cat /testbed/calc.py"))
    assert not term and "/testbed/notes" in obs and "return a - b" in obs
    assert info["turn"] == 4 and info["parent_episode_id"] is None and env.episode_id == root
    # a child of a child names its own parent
    (grandchild,) = env.fork(1)
    made.append(grandchild)
    assert grandchild.branch_turn == 4 and grandchild.parent_episode_id == root


def test_fork_through_wrappers_keeps_each_wrapper_and_its_state(make_env):
    make, made = make_env
    env = TimeLimit(OrderEnforcing(PromptStyle(make(), max_observation_chars=300)), 5)
    env.reset(seed=0)
    env.step(bash("seq 1 2000"))
    kids = fork_env(env, 2)
    made.extend(k.unwrapped for k in kids)
    for kid in kids:
        assert type(kid) is TimeLimit and kid.unwrapped is not env.unwrapped
        assert kid._elapsed_steps == 1
        inner = kid.env.env
        assert isinstance(inner, PromptStyle) and inner.max_observation_chars == 300
        obs, *_ = kid.step(bash("seq 1 2000"))
        assert len(obs) <= 300 and "characters cut" in obs
    assert env._elapsed_steps == 1  # the parent's own count
    (kid,) = env.env.env.fork(1)  # PromptStyle forwards fork, keeping its settings
    made.append(kid.unwrapped)
    assert isinstance(kid, PromptStyle) and kid.max_observation_chars == 300


def test_fork_errors(make_env):
    make, _ = make_env
    env = make()
    with pytest.raises(ResetNeeded, match="cannot fork"):
        env.fork(1)  # never reset
    env.reset(seed=0)
    with pytest.raises(ValueError, match="integer >= 1.*got 0"):
        env.fork(0)
    env.step(SUBMIT)
    with pytest.raises(ResetNeeded, match="episode is over"):
        env.fork(2)
    env.reset(seed=0)
    env.close()
    with pytest.raises(ResetNeeded, match="cannot fork"):
        env.fork(1)
    with pytest.raises(ForkUnsupported, match="cannot fork"):
        fork_env(OrderEnforcing(_NoFork()), 2)


class _NoFork(gym.Env):
    """A bare env with no fork: ``fork_env`` names it."""
