"""Reward shaping: DAPO's soft overlong punishment and the turn-based length penalty."""

from __future__ import annotations

import torch
from torch import Tensor


def overlong_penalty(lengths: Tensor, max_len: int = 20480, cache_len: int = 4096) -> Tensor:
    """DAPO soft overlong punishment (docs/methods.md#overlong-shaping), added to the task reward.

    ``R = 0`` if ``|y| <= L_max - L_cache``; ``((L_max - L_cache) - |y|) / L_cache`` if
    ``L_max - L_cache < |y| <= L_max``; ``-1`` beyond ``L_max``. ``lengths`` ``[N]`` (tokens).
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len; got cache_len={cache_len}, max_len={max_len}"
        )
    lengths = torch.as_tensor(lengths)
    free = max_len - cache_len
    ramp = (free - lengths.to(torch.float32)) / cache_len
    out = torch.where(lengths <= free, torch.zeros_like(ramp), ramp)
    return torch.where(lengths > max_len, torch.full_like(ramp, -1.0), out)


def turn_length_penalty(turns: Tensor, threshold: int = 10, max_turns: int = 40) -> Tensor:
    """Nebius turn-based length penalty, added to the binary task reward
    (docs/methods.md#turn-based-length-penalty).

    ``R_len = 0`` if ``|tau| < L_thr`` else ``(L_thr - |tau|) / (T_max - L_thr)``, with |tau| in
    turns; it reaches -1 at ``T_max`` (no clamp beyond: the env caps episodes at T_max).
    """
    if max_turns <= threshold:
        raise ValueError(
            f"need max_turns > threshold; got max_turns={max_turns}, threshold={threshold}"
        )
    turns = torch.as_tensor(turns)
    ramp = (threshold - turns.to(torch.float32)) / (max_turns - threshold)
    return torch.where(turns < threshold, torch.zeros_like(ramp), ramp)
