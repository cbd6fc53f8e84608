"""Advantage estimators, registered by name (``advantage_estimator``): ``grpo`` (group-normalised)
and ``rloo`` (leave-one-out)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from swe_gym.errors import unknown_choice


def _group_stats(values: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group mean, unbiased std, and whether the group is constant.

    "Constant" (all rewards equal, or a single sample) is decided by max == min, not by a std
    that float rounding can leave at 1e-17, so such groups get exactly-zero advantages.
    """
    if values.dim() != 1 or group_index.shape != values.shape:
        raise ValueError(
            f"rewards must be 1-D with a group_index of the same shape; got rewards "
            f"{tuple(values.shape)}, group_index {tuple(group_index.shape)}"
        )
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    v = values.to(torch.float64)  # group stats in float64: rewards are few, precision is cheap
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=v.device)
    count = zeros.index_add(0, inverse, torch.ones_like(v))
    mean = zeros.index_add(0, inverse, v) / count
    sq = zeros.index_add(0, inverse, (v - mean[inverse]) ** 2)
    hi = zeros.scatter_reduce(0, inverse, v, "amax", include_self=False)
    lo = zeros.scatter_reduce(0, inverse, v, "amin", include_self=False)
    constant = hi == lo
    std = torch.where(constant, zeros, (sq / (count - 1).clamp(min=1)).sqrt())
    return mean[inverse], std[inverse], constant[inverse]


def group_advantages(
    rewards: Tensor,
    group_index: Tensor | None = None,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Group-relative advantages (GRPO, docs/methods.md#grpo; DAPO uses the same).

    ``A_i = (r_i - mean_g(r)) / (std_g(r) + eps)`` with ``normalize_std``, else
    ``A_i = r_i - mean_g(r)``; ``std`` is the unbiased (n-1) sample std of the group.

    Args:
        rewards: ``[N]`` with ``group_index`` ``[N]`` (any integer ids, e.g. the task index), or
            ``[G, n]`` (G groups of n samples) with ``group_index`` None.
        normalize_std: divide by the group std (GRPO); False gives the mean-centred form
            (Dr. GRPO / the Nebius variant without std).
        eps: added to the std so all-equal groups give 0 rather than NaN.

    Returns:
        Advantages with the shape of ``rewards`` (float32, or rewards' float dtype).
        All-equal groups give 0; a single-sample group gives 0 (no baseline information).
    """
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    if rewards.dim() == 2 and group_index is None:
        g, n = rewards.shape
        index = torch.arange(g, device=rewards.device).repeat_interleave(n)
        return group_advantages(
            rewards.reshape(-1), index, normalize_std=normalize_std, eps=eps
        ).reshape(g, n)
    if group_index is None:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} need a group_index [N]; "
            "or pass rewards as [G, n]"
        )
    mean, std, constant = _group_stats(rewards, group_index)
    adv = rewards.to(torch.float64) - mean
    if normalize_std:
        adv = adv / torch.where(constant, torch.ones_like(std), std + eps)
    return torch.where(constant, torch.zeros_like(adv), adv).to(out_dtype)


def rloo_advantages(rewards: Tensor, group_index: Tensor | None = None) -> Tensor:
    """RLOO leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

    ``A_i = r_i - mean_{j != i, j in g(i)} r_j = n / (n - 1) * (r_i - mean_g(r))`` for a group
    of ``n >= 2``; a single-sample group gives 0 (no baseline). Shapes as
    :func:`group_advantages` (``[N]`` with ``group_index``, or ``[G, n]``).
    """
    centred = group_advantages(rewards, group_index, normalize_std=False)  # 0: constant groups
    if group_index is None:  # [G, n] (group_advantages checked the layout)
        n = torch.tensor(float(rewards.shape[-1]), dtype=centred.dtype)
    else:
        _, inverse, counts = torch.unique(group_index, return_inverse=True, return_counts=True)
        n = counts[inverse].to(centred.dtype)
    return centred * n / (n - 1).clamp(min=1)


# name -> fn(rewards [N], group_index [N], *, normalize_std) -> advantages [N]
AdvantageEstimator = Callable[..., Tensor]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_advantage_estimator(
    name: str,
) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Register ``fn(rewards, group_index, *, normalize_std) -> advantages`` under ``name``."""

    def deco(fn: AdvantageEstimator) -> AdvantageEstimator:
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return deco


@register_advantage_estimator("grpo")
def _grpo(rewards: Tensor, group_index: Tensor, *, normalize_std: bool = True) -> Tensor:
    return group_advantages(rewards, group_index, normalize_std=normalize_std)


@register_advantage_estimator("rloo")
def _rloo(rewards: Tensor, group_index: Tensor, *, normalize_std: bool = True) -> Tensor:
    return rloo_advantages(rewards, group_index)  # the leave-one-out baseline: no std


def compute_advantages(
    name: str, rewards: Tensor, group_index: Tensor, *, normalize_std: bool = True
) -> Tensor:
    """Advantages by estimator name: ``grpo`` (:func:`group_advantages`, ``normalize_std``
    applies) or ``rloo`` (:func:`rloo_advantages`; no std normalisation)."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise unknown_choice("advantage estimator", name, ADVANTAGE_ESTIMATORS)
    return ADVANTAGE_ESTIMATORS[name](rewards, group_index, normalize_std=normalize_std)
