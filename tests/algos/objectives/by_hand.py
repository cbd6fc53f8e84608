"""Helpers of the hand-computed objectives tests: ``T`` and a float64 ``close``."""

from __future__ import annotations

import torch

T = torch.tensor


def close(a, b, tol=1e-6):
    return torch.allclose(
        torch.as_tensor(a, dtype=torch.float64),
        torch.as_tensor(b, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )
