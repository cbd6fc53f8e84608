"""A custom agent in under 20 lines (the README's snippet, run verbatim), and one that raises."""

from __future__ import annotations

from agents.react import run_episode

SNIPPET = """
import gymnasium as gym

import swe_gym  # registers the envs
from agents.react import run_episode


class LookThenSubmit:  # an agent: any object with reset() and act(), text in, text out
    def reset(self, observation, info):
        self.turn = 0

    def act(self, observation, info):
        self.turn += 1
        return "```bash\\ngrep -rn def . | head\\n```" if self.turn == 1 else "```\\nsubmit\\n```"


env = gym.make("SWEStarter-v0", max_turns=10)
traj = run_episode(env, LookThenSubmit())
print(traj.finish_reason, traj.reward, len(traj.turns))
"""


def test_readme_custom_agent_snippet(capsys):
    assert len(SNIPPET.strip().splitlines()) < 20
    scope: dict = {}
    exec(compile(SNIPPET, "README-snippet", "exec"), scope)
    traj = scope["traj"]
    assert traj.finish_reason == "submitted", traj.error
    assert len(traj.turns) == 2 and traj.turns[0].tool == "bash"
    assert "def " in traj.turns[0].observation
    assert traj.reward == 0.0 and not traj.resolved  # it changed nothing
    assert capsys.readouterr().out.strip() == "submitted 0.0 2"
    assert scope["env"].unwrapped.sandbox is None


class _Explodes:
    def __init__(self, env):
        self.env = env
        self.sandbox = None

    def reset(self, observation, info):
        self.turn = 0

    def act(self, observation, info):
        self.turn += 1
        if self.turn == 2:
            self.sandbox = self.env.unwrapped.sandbox
            raise RuntimeError("agent bug on turn 2")
        return "```bash\ntouch scratch.txt\n```"


def test_agent_that_raises_is_recorded_and_the_sandbox_cleaned(make_env):
    env = make_env()
    agent = _Explodes(env)
    traj = run_episode(env, agent)
    assert traj.finish_reason == "error"
    assert "RuntimeError: agent bug on turn 2" in traj.error
    assert len(traj.turns) == 1
    assert "scratch.txt" in traj.patch  # the partial diff, taken before the sandbox went
    assert agent.sandbox is not None and env.unwrapped.sandbox is None
    assert _sandbox_gone(agent.sandbox)


def _sandbox_gone(sandbox) -> bool:
    """The sandbox's host-side workspace no longer exists."""
    import os

    for attr in ("host_dir", "root", "workspace", "host_workdir"):
        path = getattr(sandbox, attr, None)
        if path is not None:
            return not os.path.exists(path)
    raise AssertionError(f"cannot find the workspace of {sandbox!r} to check it was removed")
