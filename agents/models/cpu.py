"""Which dtype a model should compute in on this CPU.

PyTorch runs bfloat16 GEMMs through oneDNN only on CPUs with AVX-512 (BW/VL/DQ, AMX) or Arm
BF16. Elsewhere (AVX2-only x86: many laptops and cloud vCPUs) ``torch.mm`` in bfloat16 falls back
to a scalar loop, about 50x slower than float32, and vLLM's CPU backend ends in the same loop. A
checkpoint stored in bfloat16 (SmolLM2's converted folder) must therefore not be run in its own
dtype ("auto") on such a CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

HALF = ("bfloat16", "float16")


def cpu_bf16_fast() -> bool:
    """True when torch runs bfloat16 GEMMs on this CPU through oneDNN (not the scalar loop)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN: the loop everywhere
        return False


def checkpoint_dtype(path: str | Path) -> str | None:
    """The dtype a Hugging Face folder's ``config.json`` records (``dtype`` or the older
    ``torch_dtype``), or None when it records none or the folder has no config."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value).removeprefix("torch.") if value else None


def cpu_engine_dtype(dtype: str, path: str | Path, fast: bool | None = None) -> str:
    """The dtype a CPU engine should load ``path`` in when asked for ``dtype``: ``auto`` on a
    half-precision checkpoint becomes ``float32`` where bfloat16 is slow (``fast``: default
    this machine); an explicit dtype is kept."""
    if dtype != "auto" or checkpoint_dtype(path) not in HALF:
        return dtype
    return "auto" if (cpu_bf16_fast() if fast is None else fast) else "float32"
