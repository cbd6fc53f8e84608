"""The toy run of the trainer tests: ToyKeyword-v0 (reward 1 when the reply holds the target)
with the tiny random policy, three new tokens in one turn; a Trainer on it builds and runs an
iteration in seconds on a CPU. Its settings live here once; a test module names only how its
run differs (sizes, the algorithm)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from algos.dapo import DAPOConfig

# The toy run's settings, shared by the config-object tests and the CLI tests.
TOY: dict[str, Any] = {
    "env": "ToyKeyword-v0",
    "env_kwargs": {"target": "e"},
    "policy": "tiny-random",
    "max_new_tokens": 3,
    "max_turns": 1,
    "max_context_tokens": 128,
    "progress": False,
}


def toy_fields(run_dir: Path, **kw: Any) -> dict[str, Any]:
    """The toy run's config fields, written to ``run_dir``; ``kw`` over them."""
    return {"run_dir": str(run_dir), **copy.deepcopy(TOY), **kw}  # a test may change env_kwargs


def toy_cfg(tmp_path: Path, cls: type = DAPOConfig, name: str = "run", **kw: Any) -> Any:
    """A ``cls`` config (DAPO by default) of the toy run in ``tmp_path / name``; DAPO's
    turn-length penalty off (one turn: nothing to shape) unless ``kw`` sets it."""
    if cls is DAPOConfig:
        kw.setdefault("length_penalty", False)
    return cls(**toy_fields(tmp_path / name, **kw))


# The CLI tests' toy run (`python -m algos.dapo` flags): TOY at the small sizes those tests
# share (group 4, 2 problems, batch 2).
TOY_FLAGS: dict[str, Any] = {
    **TOY,
    "group_size": 4,
    "problems_per_iteration": 2,
    "batch_size": 2,
    "length_penalty": False,
    "lr": 1e-3,
}


def toy_argv(**kw: Any) -> list[str]:
    """The toy run as command-line flags, ``kw`` over :data:`TOY_FLAGS` (a value of None drops
    the flag): ``field_name=v`` becomes ``--field-name v``, a dict JSON, a bool false/true."""
    out: list[str] = []
    for name, value in {**TOY_FLAGS, **kw}.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, dict):
            text = json.dumps(value)
        else:
            text = str(value)
        out += [f"--{name.replace('_', '-')}", text]
    return out
