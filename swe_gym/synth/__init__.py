"""Synthetic SWE tasks from any local git repository whose tests run with pytest.

Bugs are injected by AST mutation operators (``operators``) as minimal source edits, each
candidate is validated by running the tests in a sandbox (``validate``), accepted bugs become
root commits of a derived repository (``derived``), and each row's issue text is written from
the failing tests' output (``issue``). ``split`` keeps every function's bugs on one side of a
train / held-out split. Entry point: ``python -m swe_gym.synth REPO --out tasks.jsonl``.
"""

from __future__ import annotations

from swe_gym.synth.operators import OPERATORS, Mutation, mutations_of
from swe_gym.synth.pipeline import SynthConfig, synthesize


def __getattr__(name: str):  # noqa: ANN202 - lazy: `python -m swe_gym.synth.split` runs that module fresh
    if name in ("function_of", "split_tasks"):
        from swe_gym.synth import split

        return getattr(split, name)
    raise AttributeError(f"module 'swe_gym.synth' has no attribute {name!r}")


__all__ = [
    "OPERATORS",
    "Mutation",
    "SynthConfig",
    "function_of",
    "mutations_of",
    "split_tasks",
    "synthesize",
]
