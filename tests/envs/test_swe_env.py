import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import swe_gym  # noqa: F401  (registers the ids)
from swe_gym.oracle import oracle_actions
from swe_gym.tasks import normalise_row


@pytest.fixture
def make_env(mini_repo):
    row, repos = mini_repo
    envs = []

    def make(**kw):
        kw.setdefault("tasks", [row])
        kw.setdefault("sandbox_options", {"repos_dir": str(repos)})
        env = gym.make("SWEStarter-v0", **kw)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def fenced(cmd):
    return f"thinking\n```\n{cmd}\n```"


@pytest.mark.parametrize("fmt", ["fenced", "json"])
def test_oracle_resolves_and_gets_reward_one(make_env, mini_repo, fmt):
    env = make_env(action_format=fmt)
    obs, info = env.reset(seed=0)
    assert "add(2, 2) returns 0" in obs and "str_replace_editor" in info["system_prompt"]
    task = normalise_row(mini_repo[0])
    for action in oracle_actions(task, fmt):
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"], obs
        if terminated:
            break
    assert terminated and not truncated
    assert reward == 1.0 and info["resolved"]
    assert "return a + b" in info["patch"]
    assert info["report"]["status"]["tests/test_calc.py::test_add"] == "PASSED"


def test_submitting_no_change_gets_zero(make_env):
    env = make_env()
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(fenced("submit"))
    assert terminated and reward == 0.0
    assert info["report"]["f2p_failed"] == ["tests/test_calc.py::test_add"]


def test_breaking_a_p2p_test_gets_zero(make_env):
    env = make_env()
    env.reset(seed=0)
    env.step(fenced("sed -i 's/return a - b/return a + b/' calc.py"))  # fixes add AND breaks sub
    _, reward, terminated, _, info = env.step(fenced("submit"))
    assert terminated and reward == 0.0
    assert info["report"]["p2p_failed"] == ["tests/test_calc.py::test_sub"]
    assert info["report"]["f2p_failed"] == []


def test_editing_tests_cannot_change_the_verdict(make_env):
    env = make_env()
    env.reset(seed=0)
    # Delete the assertion the agent cannot satisfy; grading restores the task's own tests.
    env.step(
        fenced(
            "printf 'def test_add():\\n    pass\\ndef test_sub():\\n    pass\\n' > tests/test_calc.py"
        )
    )
    _, reward, *_ = env.step(fenced("submit"))
    assert reward == 0.0


def test_invalid_actions_are_observations(make_env):
    env = make_env()
    env.reset(seed=0)
    for text, reason in [
        ("no block", "no_command"),
        ("```\nls\n```\n```\npwd\n```", "multiple_commands"),
    ]:
        obs, reward, terminated, truncated, info = env.step(text)
        assert info["invalid_action"] and info["invalid_reason"] == reason
        assert reason in obs and not terminated and not truncated and reward == 0.0
    obs, *_, info = env.step(fenced("echo still-alive"))
    assert "still-alive" in obs and not info["invalid_action"]


def test_persistent_shell_and_prompt_line(make_env):
    env = make_env()
    env.reset(seed=0)
    env.step(fenced("cd tests && export FOO=bar"))
    obs, *_ = env.step(fenced("echo $FOO; ls"))
    assert "bar" in obs and "test_calc.py" in obs
    assert obs.rstrip().endswith("/tests)")  # "(Current directory: .../tests)"


def test_interactive_command_gets_a_message_not_a_hang(make_env):
    env = make_env(command_timeout=20)
    env.reset(seed=0)
    obs, _, terminated, truncated, info = env.step(fenced("vim calc.py"))
    assert not terminated and not truncated
    assert "interactive" in obs.lower()


def test_command_timeout_is_an_observation(make_env):
    env = make_env(command_timeout=1)
    env.reset(seed=0)
    obs, *_ = env.step(fenced("sleep 30"))
    assert "timed out after 1 s" in obs
    obs, *_ = env.step(fenced("echo ok"))
    assert "ok" in obs


def test_max_turns_truncates_and_grades(make_env):
    env = make_env(max_turns=2)
    env.reset(seed=0)
    env.step(fenced("sed -i '2s/a - b/a + b/' calc.py"))
    _, reward, terminated, truncated, info = env.step(fenced("git diff --stat"))
    assert truncated and not terminated
    assert reward == 1.0 and info["report"]["resolved"]
    with pytest.raises(ResetNeeded):
        env.step(fenced("ls"))


def test_truncation_without_grading(make_env):
    env = make_env(max_turns=1, grade_on_truncation=False)
    env.reset(seed=0)
    _, reward, _, truncated, info = env.step(fenced("sed -i '2s/a - b/a + b/' calc.py"))
    assert truncated and reward == 0.0 and info["report"] is None
    assert "return a + b" in info["patch"]


def test_check_env_passes(make_env):
    env = make_env(max_turns=3, grade_on_truncation=False)
    check_env(env.unwrapped, skip_render_check=True)


def test_two_envs_on_the_same_task_share_nothing(make_env):
    a, b = make_env(), make_env()
    a.reset(seed=0)
    b.reset(seed=0)
    a.step(fenced("echo changed > calc.py"))
    obs, *_ = b.step(fenced("cat calc.py"))
    assert "def add" in obs
    assert (
        a.unwrapped.sandbox.workdir != b.unwrapped.sandbox.workdir
        or a.unwrapped.sandbox is not b.unwrapped.sandbox
    )


def test_reset_is_seeded(mini_repo):
    row, repos = mini_repo
    rows = [dict(row, instance_id=f"local__mini-{i}") for i in range(5)]
    picks = []
    for _ in range(2):
        env = gym.make("SWEStarter-v0", tasks=rows, sandbox_options={"repos_dir": str(repos)})
        picks.append([env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3)])
        env.close()
    assert picks[0] == picks[1]


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"backend": "dokcer"}, "Did you mean 'docker'"),
        ({"action_format": "xml"}, "choose one of: fenced, json"),
        ({"max_turns": 0}, "max_turns"),
    ],
)
def test_bad_options_name_the_accepted_values(mini_repo, kw, needle):
    with pytest.raises(ValueError, match=needle):
        gym.make("SWEStarter-v0", tasks=[mini_repo[0]], **kw)


def test_unknown_task_id_and_reset_option(make_env):
    env = make_env()
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="accepted: task_id"):
        env.reset(options={"taskid": "x"})


def test_unknown_env_id_lists_ids():
    with pytest.raises(gym.error.Error):
        gym.make("SWEStarterr-v0")


def _leftovers():
    import glob
    import tempfile

    import psutil

    dirs = set(glob.glob(f"{tempfile.gettempdir()}/swe_gym_local_*"))
    procs = {p.pid for p in psutil.Process().children(recursive=True)}
    return dirs, procs


def test_nothing_leaks_after_close_or_an_exception(make_env):
    dirs0, procs0 = _leftovers()
    env = make_env()
    env.reset(seed=0)
    env.step(fenced("sleep 1000 &"))  # a background process the agent left behind
    assert _leftovers()[0] - dirs0
    env.close()
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="boom"):
        with make_env() as env2:
            env2.reset(seed=0)
            env2.step(fenced("sleep 1000 &"))
            raise RuntimeError("boom")
    dirs1, procs1 = _leftovers()
    assert dirs1 - dirs0 == set()
    assert procs1 - procs0 == set()


@pytest.mark.parametrize("grading", [None, {"memory_limit": "2g"}])
def test_grading_sandbox_options_go_to_the_grader_only(make_env, mini_repo, monkeypatch, grading):
    import envs.swe_env as swe_env_module
    from swe_gym.grading import grade_patch

    seen = []

    def spy(task, patch, *, sandbox_options=None, **kw):
        seen.append(sandbox_options)
        return grade_patch(task, patch, sandbox_options={"repos_dir": str(mini_repo[1])}, **kw)

    monkeypatch.setattr(swe_env_module, "grade_patch", spy)
    kw = {} if grading is None else {"grading_sandbox_options": grading}
    env = make_env(**kw)
    env.reset(seed=0)
    assert env.unwrapped.sandbox_options == {"repos_dir": str(mini_repo[1])}
    _, _, terminated, _, info = env.step(fenced("submit"))
    assert terminated and info["end_reason"] == "submitted"
    assert seen == [grading or {"repos_dir": str(mini_repo[1])}]
