"""How the learner computes on CUDA: TF32, optional Liger kernels, and a bf16 compute copy.

Autocast keeps float32 parameters and casts them to bf16 at every op that uses them, again
in the recomputation of activation checkpointing (about 2,000 cast kernels per step on a 1.5B
model). :class:`BF16ComputeCopy` instead holds one bf16 copy of the model: the float32 master
weights are copied into it once per optimiser step, forward and backward run on it with no
casts, and after each micro-batch its bf16 gradients are added into the float32 master
gradients (so accumulation over micro-batches stays float32); the optimiser updates the master
weights. This is what FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``
does under torchrun (verl, prime-rl, torchtitan); in one process a plain copy does it without a
process group. Buffers (the rotary ``inv_freq``) stay float32.

Nothing here runs on the CPU path unless asked for (``LearnerConfig.bf16_compute_copy=True``).
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

log = logging.getLogger(__name__)


def setup_cuda(model: nn.Module, liger: bool) -> None:
    """CUDA-only speed settings: TF32 for the float32 matmuls that remain (process-wide), and
    Liger's fused RMSNorm/SwiGLU/RoPE kernels when the package is installed and ``liger``."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9 names the precision
        matmul.fp32_precision = "tf32"
    else:
        matmul.allow_tf32 = True
    if not liger:
        return
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance
    except ImportError:
        return
    try:  # the loss stays ours (chunked log-probs): only the layer kernels are swapped
        _apply_liger_kernel_to_instance(
            model=model,
            rope=True,
            rms_norm=True,
            swiglu=True,
            cross_entropy=False,
            fused_linear_cross_entropy=False,
        )
    except Exception as e:  # noqa: BLE001 - an optional speed-up must not stop training
        log.warning(
            "liger kernels not applied to %s: %s: %s", type(model).__name__, type(e).__name__, e
        )
    else:
        log.info("liger kernels applied to %s", type(model).__name__)


class BF16ComputeCopy:
    """A bf16 copy of ``master`` for forward/backward; see the module docstring."""

    def __init__(self, master: nn.Module, dtype: torch.dtype = torch.bfloat16) -> None:
        self.module = copy.deepcopy(master)  # keeps tied weights tied, hooks and config
        with torch.no_grad():
            for p in self.module.parameters():
                p.data = p.data.to(dtype)
        # parameters() yields each tied Parameter once, in the same order for both modules
        self.pairs = [
            (m, c)
            for m, c in zip(master.parameters(), self.module.parameters(), strict=True)
            if m.requires_grad
        ]

    @torch.no_grad()
    def load_master(self) -> None:
        """The master weights into the copy (once per optimiser step)."""
        for m, c in self.pairs:
            c.copy_(m)

    @torch.no_grad()
    def add_grads_to_master(self) -> None:
        """The copy's gradients added into the master's float32 gradients, then cleared."""
        for m, c in self.pairs:
            if c.grad is None:
                continue
            if m.grad is None:
                m.grad = c.grad.to(m.dtype)
            else:
                m.grad.add_(c.grad)
            c.grad = None
