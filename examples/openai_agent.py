"""An agent program written only against the ``openai`` client and a ``gymnasium`` env.

It imports nothing from this project: it is the kind of program ``--agent`` trains::

    python -m algos.dapo --env ToyKeyword-v0 --policy tiny-random \\
        --agent examples.openai_agent:make_agent ...

The trainer calls ``make_agent(base_url=..., api_key=..., model=...)`` once per episode and
then the returned program with the episode's env; the program plays one episode (system prompt
and observation in, each reply stepped into the env, each observation appended) and returns
the total reward. Run alone, against any OpenAI-compatible server::

    python examples/openai_agent.py --base-url http://127.0.0.1:8000/v1 --model NAME \\
        --env SWEStarter-v0

(there, ``import swe_gym`` registers the env ids: the one project import, for ``gym.make``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import openai


def make_agent(base_url: str, api_key: str, model: str) -> Callable[[gym.Env], float]:
    """A program that plays one episode of an env with the model behind ``base_url``."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key)

    def play(env: gym.Env) -> float:
        observation, info = env.reset()
        messages: list[dict[str, Any]] = []
        if info.get("system_prompt"):
            messages.append({"role": "system", "content": info["system_prompt"]})
        messages.append({"role": "user", "content": observation})
        total = 0.0
        while True:
            response = client.chat.completions.create(model=model, messages=messages)
            reply = response.choices[0].message.content or ""
            observation, reward, terminated, truncated, info = env.step(reply)
            total += float(reward)
            if terminated or truncated:
                return total
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "user", "content": observation})

    return play


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--env", default="ToyKeyword-v0")
    args = parser.parse_args(argv)
    import swe_gym  # noqa: F401 - registers the env ids for gym.make

    with gym.make(args.env) as env:
        print("reward:", make_agent(args.base_url, args.api_key, args.model)(env))


if __name__ == "__main__":
    main()
