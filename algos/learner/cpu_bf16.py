"""Does this CPU multiply bfloat16 fast? And which config settings would hit the slow path.

PyTorch runs bfloat16 GEMMs through oneDNN only on CPUs with AVX-512 (BW/VL/DQ, AMX) or Arm
BF16. Elsewhere (AVX2-only x86: many laptops and cloud vCPUs) ``torch.mm`` in bfloat16 falls back
to a scalar loop, and vLLM's CPU backend, unable to build its oneDNN bfloat16 matmul ("Failed to
create oneDNN linear, fallback to torch linear"), ends in the same loop. Measured on a 2-core
AVX2 AMD EPYC: a 512x576 @ 576x1536 matmul took 14 ms of CPU in float32 and 750 ms in bfloat16
(53x), and the DAPO ``--preset cpu`` job's first train step (bf16 autocast) ran for more than
9 minutes. Threads were not the cause: the in-process vLLM engine binds none, and the learner
runs with torch's default thread count.
"""

from __future__ import annotations

from typing import Any

from agents.models.cpu import cpu_bf16_fast  # noqa: F401 (re-exported; patched in tests)


def slow_bf16_settings(
    cfg: object, *, on_gpu: bool | None = None, fast: bool | None = None
) -> list[str]:
    """The settings of ``cfg`` (``bf16``, ``engine_dtype``) that would run bfloat16 GEMMs on a CPU
    without fast bfloat16; empty on a GPU or on a CPU with it.

    ``on_gpu`` / ``fast`` default to this machine (CUDA present; :func:`cpu_bf16_fast`).
    """
    if on_gpu is None:
        import torch

        on_gpu = torch.cuda.is_available()
    if on_gpu:
        return []
    slow = []
    if getattr(cfg, "bf16", False):
        slow.append("bf16=true")
    # the engine samples only when the policy rolls out (another rollout_model has its own)
    if (
        getattr(cfg, "engine_dtype", "float32") == "bfloat16"
        and getattr(cfg, "rollout_model", "policy") == "policy"
    ):
        slow.append("engine_dtype=bfloat16")
    if slow and (cpu_bf16_fast() if fast is None else fast):
        return []
    return slow


def slow_bf16_warning(cfg: object, **kwargs: Any) -> str | None:
    """A warning naming the slow settings and what to set instead, or None when there are none
    (``kwargs``: as :func:`slow_bf16_settings`)."""
    slow = slow_bf16_settings(cfg, **kwargs)
    if not slow:
        return None
    import torch

    return (
        f"{', '.join(slow)} on a CPU without fast bfloat16 matrix multiplication (torch "
        f"reports {torch.backends.cpu.get_cpu_capability()}; needs AVX-512, AMX or Arm BF16): "
        "bfloat16 GEMMs fall back to a scalar loop, about 50x slower than float32. Set "
        "bf16=false and engine_dtype=float32, or run on a GPU."
    )
