"""A fake episode for the scoring and rollout tests: only what they read of a Trajectory."""

from __future__ import annotations

from types import SimpleNamespace


def traj(
    task="t",
    reward=1.0,
    finish="done",
    turns=1,
    token_exact=True,
    error=None,
    ids=(1, 2, 3, 4),
    mask=(0, 1, 1, 1),
    resolved=None,
    last_reason="stop",
):
    """An episode of ``task``: its reward, finish reason, turns (the last one ended by
    ``last_reason``) and the sample arrays it turns into (``ids``, loss ``mask``)."""
    lps = [-0.5] * len(ids)
    return SimpleNamespace(
        task_id=task,
        reward=reward,
        finish_reason=finish,
        error=error,
        turns=[SimpleNamespace(completion_finish_reason=last_reason)] * turns,
        num_turns=turns,
        token_exact=token_exact,
        resolved=bool(reward) if resolved is None else resolved,
        to_sample_arrays=lambda mask_invalid: (list(ids), list(mask), list(lps)),
    )
