"""Task selection shared by the envs: ``options={"task_id": ...}`` or a seeded draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from swe_gym.errors import unknown_choice

T = TypeVar("T")


def select_task(
    tasks: Sequence[T], by_id: Mapping[str, T], np_random: np.random.Generator, task_id: Any = None
) -> T:
    """The task named ``task_id``, or one drawn with the env's seeded generator when it is None."""
    if task_id is None:
        return tasks[int(np_random.integers(len(tasks)))]
    if task_id not in by_id:
        raise unknown_choice("task_id", task_id, by_id)
    return by_id[task_id]
