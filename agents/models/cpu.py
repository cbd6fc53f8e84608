"""Which dtype a model should compute in on this CPU.

PyTorch runs bfloat16 GEMMs through oneDNN only on CPUs with AVX-512 (BW/VL/DQ, AMX) or Arm
BF16. Elsewhere (AVX2-only x86: many laptops and cloud vCPUs) ``torch.mm`` in bfloat16 falls back
to a scalar loop, about 50x slower than float32, and vLLM's CPU backend ends in the same loop.
vLLM's ``dtype="auto"`` runs a bfloat16 checkpoint (SmolLM2's converted folder) in bfloat16 and
also downcasts a float32 one (every checkpoint our trainers write) to bfloat16, so on such a CPU
"auto" must become float32.
"""

from __future__ import annotations


def cpu_bf16_fast() -> bool:
    """True when torch runs bfloat16 GEMMs on this CPU through oneDNN (not the scalar loop)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN: the loop everywhere
        return False


def cpu_engine_dtype(dtype: str, fast: bool | None = None) -> str:
    """The dtype a CPU vLLM engine should be given when asked for ``dtype``: ``auto`` becomes
    ``float32`` where bfloat16 is slow (``fast``: default this machine), whatever the
    checkpoint's dtype (vLLM's "auto" computes a float32 checkpoint in bfloat16 too); an
    explicit dtype is kept."""
    if dtype != "auto" or (cpu_bf16_fast() if fast is None else fast):
        return dtype
    return "float32"
