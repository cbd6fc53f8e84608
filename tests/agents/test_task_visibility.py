"""An agent learns its task from the env, not the answer: ``run_episode`` hands agents and
engines the public view of the task, and the whole task only to what declares it replays the
answer (the oracle)."""

from __future__ import annotations

import gymnasium as gym

import swe_gym  # noqa: F401  (registers the ids)
from agents.models import OracleModel
from agents.react import public_task, run_episode

TASK = "starter__tinystats-2"


class _Peek:
    """An agent that records what reset gave it, then submits."""

    def __init__(self):
        self.seen = None

    def reset(self, observation, info):
        self.seen = info.get("task")

    def act(self, observation, info):
        return "```\nsubmit\n```"


def test_an_agent_sees_no_answer_and_the_oracle_still_solves():
    env = gym.make("SWEStarter-v0", instance_ids=[TASK], max_turns=10)
    peek = _Peek()
    traj = run_episode(env, peek, seed=0, close_env=False)
    assert traj.finish_reason == "submitted" and not traj.resolved
    assert set(peek.seen) == {"instance_id", "repo", "base_commit", "problem_statement", "version"}
    task = env.unwrapped.task
    assert peek.seen == public_task(task) and task.patch not in repr(peek.seen)
    solved = run_episode(env, OracleModel(tasks=None), seed=0)
    assert solved.resolved and solved.reward == 1.0
