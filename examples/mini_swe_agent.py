"""mini-swe-agent (``pip install mini-swe-agent``, the SWE-agent team's small agent) as a
trainable agent program::

    python -m algos.rft --rollout-model oracle --tasks starter__tinystats-2 --runs-per-task 1 \\
        --policy tiny-random --agent examples.mini_swe_agent:make_agent

Its own ``DefaultAgent`` runs the episode with its own prompts (``mini_textbased.yaml``); this
file is the glue, two small classes:

- ``GatewayModel``: mini-swe-agent's text-based model over the ``openai`` client, sending no
  ``tools`` (SmolLM2's template has none: the gateway answers 400) and never retrying a 4xx
  (its litellm models retry a 400 for minutes). It parses one fenced command per reply, in
  mini-swe-agent's fence (```` ```mswea_bash_command ````) or the env's (```` ``` ````,
  ```` ```bash ````), so a policy trained in the env's format works too.
- ``GymEnvironment``: mini-swe-agent's environment over ``env.step``: each command becomes one
  fenced action of the env (bash, or the env's ``str_replace_editor``), the env's observation
  its output; its submit sentinel (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) or the env's
  ``submit`` submits, and the env's end (submitted or out of turns) ends the agent's run.

An early quit of the agent (repeated format errors, its step or cost limit) submits the work
as it is, so the env grades it (an episode the program leaves open is an error for the
trainer). An exception (the gateway's 400 when the context is full) propagates: the trainer
records it.
"""

from __future__ import annotations

import os
import platform
import re
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import openai
import yaml

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on stdout per import
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_path  # noqa: E402
from minisweagent.exceptions import FormatError, LimitsExceeded, Submitted  # noqa: E402
from minisweagent.models.utils.actions_text import (  # noqa: E402
    format_observation_messages,
    parse_regex_actions,
)

# mini-swe-agent's fence, or the env's (bare, bash, sh): one command per reply.
ACTION_REGEX = r"```(?:mswea_bash_command|bash|sh)?[ \t]*\n(.*?)\n```"
SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_EXIT_CODE = re.compile(r"^\[exit code (-?\d+)\]$", re.M)


class GatewayModel:
    """mini-swe-agent's Model protocol: text actions, the ``openai`` client, no tools."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        observation_template: str,
        format_error_template: str,
        action_regex: str = ACTION_REGEX,
        **_: Any,
    ):
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        self.config = {
            "model_name": model,
            "action_regex": action_regex,
            "observation_template": observation_template,
            "format_error_template": format_error_template,
        }

    def query(self, messages: list[dict], **kwargs: Any) -> dict:
        api_messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        response = self.client.chat.completions.create(
            model=self.config["model_name"], messages=api_messages, **kwargs
        )
        choice = response.choices[0]
        content = choice.message.content or ""
        extra = {
            "response": response.model_dump(mode="json"),
            "cost": 0.0,
            "timestamp": time.time(),
        }
        try:
            actions = parse_regex_actions(
                content,
                action_regex=self.config["action_regex"],
                format_error_template=self.config["format_error_template"],
                template_kwargs={"finish_reason": choice.finish_reason},
            )
        except FormatError as e:
            e.messages[0]["extra"].update(extra)
            raise
        return {"role": "assistant", "content": content, "extra": {"actions": actions, **extra}}

    def format_message(self, **kwargs: Any) -> dict:
        return dict(kwargs)

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        return format_observation_messages(
            outputs,
            observation_template=self.config["observation_template"],
            template_vars=template_vars,
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return dict(self.config, **kwargs)

    def serialize(self) -> dict:
        return {"info": {"config": {"model": self.config, "model_type": "GatewayModel"}}}


def _fenced(command: str) -> str:
    """``command`` as one fenced block of the env, the fence longer than any run inside it."""
    fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", command)), default=0))
    return f"{fence}\n{command}\n{fence}"


class GymEnvironment:
    """mini-swe-agent's Environment protocol over one episode of a gym env."""

    def __init__(self, env: gym.Env):
        self.env = env
        self.config: dict[str, Any] = {}
        self.ended = False

    def execute(self, action: dict, cwd: str = "", **_: Any) -> dict[str, Any]:
        command = action.get("command", "").strip()
        submit = SUBMIT_SENTINEL in command or command == "submit"
        obs, reward, terminated, truncated, info = self.env.step(
            _fenced("submit" if submit else command)
        )
        if terminated or truncated:
            self.ended = True
            patch = info.get("patch") or ""
            status = "Submitted" if terminated else "LimitsExceeded"
            exit_message = {
                "role": "exit",
                "content": patch,
                "extra": {"exit_status": status, "submission": patch, "reward": float(reward)},
            }
            raise (Submitted if terminated else LimitsExceeded)(exit_message)
        code = _EXIT_CODE.search(obs)
        return {
            "output": obs,
            "returncode": int(code.group(1)) if code else 0,
            "exception_info": "",
        }  # an invalid action: the env's observation says why

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**platform.uname()._asdict(), **kwargs}  # its templates name the system

    def serialize(self) -> dict:
        return {"info": {"config": {"environment_type": "GymEnvironment"}}}


def make_agent(
    base_url: str, api_key: str, model: str, config: str = "mini_textbased"
) -> Callable[[gym.Env], dict]:
    """A program that plays one episode with mini-swe-agent's ``DefaultAgent``."""
    cfg = yaml.safe_load(get_config_path(config).read_text())

    def play(env: gym.Env) -> dict:
        observation, _info = env.reset()
        gym_env = GymEnvironment(env)
        agent = DefaultAgent(
            GatewayModel(base_url, api_key, model, **cfg.get("model", {})),
            gym_env,
            **cfg.get("agent", {}),
        )
        result = agent.run(task=observation)
        if not gym_env.ended:  # an early quit: submit the work as it is
            try:
                gym_env.execute({"command": "submit"})
            except Submitted as e:
                result = {**result, "submission": e.messages[0]["extra"]["submission"]}
            except LimitsExceeded:
                pass
        return result

    return play
