"""FSDP2 sharded learner support: process setup, a (dp, cp) mesh, sharding, DCP checkpoints.

One code path for every scale:

- ``python -m algos.dapo ...`` (no torchrun): world size 1, no process group; ``shard_model``
  returns the model as is and checkpoints are still DCP folders (DCP runs without a group).
- ``torchrun --nproc-per-node N -m algos.dapo ... --cp C``: a gloo (CPU) or NCCL (CUDA) group, a
  ``DeviceMesh`` of shape ``(N // C, C)`` named ``("dp", "cp")``. Parameters are sharded with
  ``fully_shard`` over the flattened ``dp_cp`` dimension (every rank holds 1/N of the weights;
  CP ranks are data-parallel replicas for the weights, they only split the sequence).

Loss normalisation (docs/methods.md#token-level-loss-averaging): every rank's loss is
``sum(local per-token losses) / global_loss_tokens`` where ``global_loss_tokens`` is
:func:`all_reduce_token_count` of the local counts over the whole world. The true gradient is then
the *sum* of the per-rank gradients, so :func:`shard_model` sets FSDP's gradient divide factor
to 1 (FSDP averages by default). The result does not depend on how the batch is split across
micro-batches, DP ranks or CP ranks.

Learner integration (the hooks a learner calls)::

    ctx = setup_distributed(cp=cfg.cp)
    model = shard_model(model, ctx)            # after building, before the optimizer
    ref = shard_model(ref_model, ctx)          # same for a frozen reference model
    my_items = ctx.split_for_dp(items)         # this DP rank's sequences
    n_tok = all_reduce_token_count(local_loss_tokens, ctx)
    ... loss = local_sum / n_tok; loss.backward() ...
    clip_grad_norm_(model.parameters(), 1.0)   # DTensor-aware total norm
    save_checkpoint(dir, model, optim, ctx, extra={"step": s})
    export_hf(dir, out_dir)                    # offline, one process: one HF folder
"""

from __future__ import annotations

import gc
import json
import os
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")
_EXTRA_FILE = "learner_state.json"
_CONFIG_DIR = "hf_config"


@dataclass
class DistContext:
    """Where this process sits: global rank/world, its (dp, cp) coordinates and groups."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    dp: int = 1
    cp: int = 1
    dp_rank: int = 0
    cp_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    mesh: Any = None  # DeviceMesh ("dp", "cp") or None when world == 1
    dp_group: Any = None
    cp_group: Any = None

    # read on every iteration's path: plain attributes, fixed with rank and world
    is_main: bool = field(init=False)
    distributed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.is_main = self.rank == 0
        self.distributed = self.world > 1

    def split_for_dp(self, items: Sequence[T]) -> list[T]:
        """This DP rank's share (round-robin, so sizes differ by at most one)."""
        return list(items[self.dp_rank :: self.dp])

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def training_device() -> torch.device:
    """Where this process trains: ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU.
    The one place this is decided (the learner, the rollout engine's copy, the smoke script)."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def setup_distributed(cp: int = 1, device: str | None = None, backend: str | None = None):
    """Initialise the process group from torchrun's env vars (or none for a single process).

    Args:
        cp: context-parallel size; must divide the world size.
        device: "cpu" or "cuda"; default cuda when available.
        backend: default gloo on CPU, nccl on CUDA.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device is None:
        device = training_device().type
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose one of: cpu, cuda")
    if cp < 1 or world % cp:
        raise ValueError(f"cp={cp} must be >= 1 and divide the world size {world}")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local_rank) if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(dev)
    if world == 1 and not dist.is_initialized():
        return DistContext(device=dev)
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if device == "cuda" else "gloo"))
    from torch.distributed.device_mesh import init_device_mesh

    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh(device, (world // cp, cp), mesh_dim_names=("dp", "cp"))
    return DistContext(
        rank=rank,
        world=world,
        local_rank=local_rank,
        dp=world // cp,
        cp=cp,
        dp_rank=mesh.get_local_rank("dp"),
        cp_rank=mesh.get_local_rank("cp"),
        device=dev,
        mesh=mesh,
        dp_group=mesh.get_group("dp"),
        cp_group=mesh.get_group("cp"),
    )


def teardown_distributed() -> None:
    """Destroy the process groups. Garbage is collected first: gloo work objects caught in
    reference cycles (autograd contexts of the ring attention) otherwise die during interpreter
    shutdown and abort the process ("terminate called without an active exception"), which
    torchrun reports as a failed run after the work is done."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def _shard_mesh(ctx: DistContext):
    if ctx.cp == 1:
        return ctx.mesh["dp"]
    if ctx.dp == 1:
        return ctx.mesh["cp"]
    return ctx.mesh["dp", "cp"]._flatten("dp_cp")


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks (HF: ``model.model.layers``); the unit FSDP wraps."""
    for path in ("model.layers", "model.model.layers", "transformer.h", "layers"):
        obj: Any = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList):
            return list(obj)
    return []


def shard_model(
    model: nn.Module,
    ctx: DistContext,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = torch.float32,
    reshard_after_forward: bool = True,
    activation_checkpointing: bool = False,
) -> nn.Module:
    """``fully_shard`` each decoder layer, then the root; gradients are *summed* over ranks.

    With world size 1 the model is only moved to ``ctx.device`` (and checkpointed per layer if
    asked). ``param_dtype`` (e.g. bf16) turns on mixed precision; reductions stay in fp32.
    A frozen reference model is sharded the same way (it simply never gets gradients).
    """
    model.to(ctx.device)
    layers = _decoder_layers(model)
    if activation_checkpointing:
        enable = getattr(model, "gradient_checkpointing_enable", None)  # an HF model's
        if enable is not None:
            enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            raise ValueError(f"{type(model).__name__} has no gradient_checkpointing_enable()")
    if not ctx.distributed:
        return model
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = _shard_mesh(ctx)
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    if not layers:
        raise ValueError(
            f"no decoder layers found on {type(model).__name__} (looked for model.layers, "
            "transformer.h, layers); shard it yourself with fully_shard"
        )
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)  # the loss is already divided by the global count
            m.set_force_sum_reduction_for_comms(True)  # plain SUM (gloo has no PREMUL_SUM)
    _install_call(model)
    return model


def _fsdp_call(self: nn.Module, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(self, *args, **kwargs)


def _install_call(model: nn.Module) -> None:
    """Give the root an FSDP "forward method" that runs any function of the model.

    FSDP2 gathers the root's own parameters (embeddings, final norm, LM head) only around the
    root's forward. The learner never calls the root's forward: it runs the base model for
    hidden states and applies the head weight itself (chunked log-probs, no [T, vocab] tensor).
    ``call_model(model, fn, ...)`` runs ``fn(model, ...)`` between the root's pre/post-forward
    hooks so those parameters are full (and their gradients reduced) as in a normal forward.
    """
    from torch.distributed.fsdp import register_fsdp_forward_method

    # torch types Module.__setattr__ for tensors and modules only; a bound method is stored as is
    model._fsdp_call = types.MethodType(_fsdp_call, model)  # type: ignore[assignment]
    register_fsdp_forward_method(model, "_fsdp_call")


def call_model(model: nn.Module, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(model, *args, **kwargs)`` with the root's parameters gathered (no-op when unsharded)."""
    call = getattr(model, "_fsdp_call", None)
    return call(fn, *args, **kwargs) if call is not None else fn(model, *args, **kwargs)


def all_reduce_token_count(count: int | torch.Tensor, ctx: DistContext) -> int:
    """Sum of the loss-token counts of every rank (DP and CP): the loss denominator."""
    if not ctx.distributed:
        return int(count)
    t = torch.tensor(float(count), dtype=torch.float64, device=_comm_device(ctx))
    dist.all_reduce(t)
    return int(round(t.item()))


def all_reduce_sum(values: dict[str, float], ctx: DistContext) -> dict[str, float]:
    """Sum a dict of float metrics over every rank (one collective)."""
    if not ctx.distributed or not values:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor(
        [float(values[k]) for k in keys], dtype=torch.float64, device=_comm_device(ctx)
    )
    dist.all_reduce(t)
    return dict(zip(keys, t.tolist(), strict=True))


def _comm_device(ctx: DistContext) -> torch.device:
    return ctx.device if ctx.device.type == "cuda" else torch.device("cpu")


def clip_grad_norm_(params: Iterable[nn.Parameter], max_norm: float) -> float:
    """Clip by the global norm over all shards; returns the norm before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(list(params), max_norm)
    if hasattr(norm, "full_tensor"):  # DTensor: the norm was reduced over the mesh
        norm = norm.full_tensor()
    return float(norm)


def full_state_dict(model: nn.Module) -> dict[str, Any]:
    """Unsharded CPU state dict on every rank (collective). For tests and small models."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=opts)


# --------------------------------------------------------------------------- checkpoints


def save_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    ctx: DistContext,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Sharded save with torch.distributed.checkpoint: each rank writes its own shards.

    The folder also gets ``learner_state.json`` (``extra``: step, scheduler state, ...) and the
    HF config under ``hf_config/`` so :func:`export_hf` can rebuild the model.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    ckpt_dir = Path(ckpt_dir)
    if optimizer is not None:
        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optim": osd}
    else:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = {"model": get_model_state_dict(model)}
    dcp.save(state, checkpoint_id=str(ckpt_dir))
    if ctx.is_main:
        (ckpt_dir / _EXTRA_FILE).write_text(
            json.dumps({"world": ctx.world, "dp": ctx.dp, "cp": ctx.cp, **(extra or {})})
        )
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "save_pretrained"):
            config.save_pretrained(ckpt_dir / _CONFIG_DIR)
    ctx.barrier()
    return ckpt_dir


def load_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    ctx: DistContext,
) -> dict[str, Any]:
    """Load a DCP checkpoint into an already sharded model (any world size: DCP reshards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    ckpt_dir = Path(ckpt_dir)
    if not (ckpt_dir / ".metadata").exists():
        raise FileNotFoundError(f"{ckpt_dir} is not a DCP checkpoint (no .metadata file)")
    state: dict[str, Any]
    if optimizer is not None:
        msd, osd = get_state_dict(model, optimizer)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(ckpt_dir))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
    else:
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=str(ckpt_dir))
        set_model_state_dict(model, state["model"])
    extra_file = ckpt_dir / _EXTRA_FILE
    return json.loads(extra_file.read_text()) if extra_file.exists() else {}


def export_hf(
    ckpt_dir: str | Path,
    out_dir: str | Path,
    dtype: torch.dtype | None = None,
    tokenizer_dir: str | Path | None = None,
) -> Path:
    """Write one HF folder (config + safetensors) from a sharded DCP checkpoint.

    Runs in one process (no torchrun); needs CPU memory for the full model (not the optimizer:
    only the model keys are read).
    """
    import torch.distributed.checkpoint as dcp
    from transformers import AutoConfig, AutoModelForCausalLM

    ckpt_dir, out_dir = Path(ckpt_dir), Path(out_dir)
    if not (ckpt_dir / _CONFIG_DIR).exists():
        raise FileNotFoundError(
            f"{ckpt_dir / _CONFIG_DIR} missing: the checkpoint was saved from a model without "
            "an HF config"
        )
    config = AutoConfig.from_pretrained(ckpt_dir / _CONFIG_DIR)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config)
    if dtype is not None:
        model.to(dtype)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=str(ckpt_dir), no_dist=True)
    model.load_state_dict(state["model"])
    model.save_pretrained(out_dir)
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(out_dir)
    return out_dir
