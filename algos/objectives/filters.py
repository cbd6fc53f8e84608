"""Which samples train: the dynamic filters, registered by name (``filter``), and failure masking."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from algos.objectives.advantages import _group_stats
from swe_gym.errors import unknown_choice


def keep_nonconstant_groups(rewards: Tensor, group_index: Tensor | None = None) -> Tensor:
    """DAPO dynamic sampling predicate: keep samples whose group rewards differ
    (docs/methods.md#dynamic-sampling).

    Returns a boolean keep-mask shaped like ``rewards`` (``[N]`` with ``group_index``, or
    ``[G, n]``); False for every sample of a group with zero reward std (all equal, including a
    single-sample group).
    """
    if rewards.dim() == 2 and group_index is None:
        g, n = rewards.shape
        index = torch.arange(g, device=rewards.device).repeat_interleave(n)
        return keep_nonconstant_groups(rewards.reshape(-1), index).reshape(g, n)
    if group_index is None:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} need a group_index [N]")
    _, _, constant = _group_stats(rewards, group_index)
    return ~constant


def keep_nonzero_advantage(
    advantages: Tensor, mask: Tensor | None = None, atol: float = 0.0
) -> Tensor:
    """Nebius filter (docs/methods.md#zero-advantage-filter): drop samples whose advantage is zero.

    ``advantages`` ``[N]`` (per sequence) or ``[N, T]`` (per token, with ``mask``): a sample is
    kept if any of its (masked) advantages has ``|A| > atol``. Returns a bool ``[N]``.
    """
    nonzero = advantages.abs() > atol
    if advantages.dim() == 1:
        return nonzero
    if mask is not None:
        nonzero = nonzero & mask.bool()
    return nonzero.any(dim=-1)


def keep_groups_without_failures(failed: Tensor, group_index: Tensor) -> Tensor:
    """Instance-level failure masking: False for every member of a group in which any episode
    failed (a sandbox or rollout error: no signal about the policy), True elsewhere.

    ``failed`` bool ``[N]``, ``group_index`` ``[N]``; returns bool ``[N]``. Masking the whole
    group rather than scoring the failure as reward 0 (a wrong negative) or dropping only the
    failed episode (a group baseline computed from the survivors of a biased draw).
    """
    if failed.shape != group_index.shape or failed.dim() != 1:
        raise ValueError(
            f"failed {tuple(failed.shape)} and group_index "
            f"{tuple(group_index.shape)} must be the same 1-D shape"
        )
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    bad = torch.zeros(n_groups, device=failed.device).index_add(0, inverse, failed.float())
    return bad[inverse] == 0


# name -> fn(rewards [N], group_index [N], advantages [N]) -> keep bool [N]
SampleFilter = Callable[[Tensor, Tensor, Tensor], Tensor]
FILTERS: dict[str, SampleFilter] = {
    "none": lambda rewards, group_index, advantages: torch.ones_like(rewards, dtype=torch.bool),
    # the Nebius filter
    "nonzero_advantage": lambda rewards, group_index, advantages: keep_nonzero_advantage(
        advantages
    ),
    # DAPO's dynamic sampling
    "nonconstant_group": lambda rewards, group_index, advantages: keep_nonconstant_groups(
        rewards, group_index
    ),
}


def keep_mask(name: str, rewards: Tensor, group_index: Tensor, advantages: Tensor) -> Tensor:
    """The bool ``[N]`` keep-mask of the filter ``name`` (one of :data:`FILTERS`)."""
    if name not in FILTERS:
        raise unknown_choice("filter", name, FILTERS)
    return FILTERS[name](rewards, group_index, advantages)
