"""Atomic training checkpoints: a Hugging Face model directory plus the learner's state.

Layout of a checkpoint directory::

    config.json, model.safetensors (or shards + index), generation_config.json  # save_pretrained
    tokenizer files                    # when a tokenizer is given
    learner_state.pt                   # optimizer, scheduler, RNG states, step, extra_state
    learner_config.json                # the learner config, for humans

The directory is loadable as-is by ``from_pretrained`` and by vLLM (which read the safetensors
and ignore the rest). It is written to a temporary sibling and renamed into place, so a process
killed mid-save leaves the previous checkpoint intact. ``learner_state.pt`` is read with
``torch.load(weights_only=False)`` (it holds numpy RNG state): load only checkpoints you wrote.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

STATE_FILE = "learner_state.pt"
CONFIG_FILE = "learner_config.json"


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU and every CUDA device) RNG states."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(root: Path) -> None:
    for path in [*root.rglob("*"), root]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _tmp_prefix(dest: Path) -> str:
    return f".{dest.name}.tmp-"


def _old_prefix(dest: Path) -> str:
    return f".{dest.name}.old-"


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' progress bars ("Writing model shards") off for the block."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def resolve_checkpoint(directory: str | os.PathLike) -> Path:
    """The directory to load: ``directory`` itself, or the previous checkpoint that a save
    killed between its two renames left at ``.NAME.old-*`` (moved back into place)."""
    dest = Path(directory)
    if (dest / STATE_FILE).exists():
        return dest
    olds = sorted(dest.parent.glob(_old_prefix(dest) + "*")) if dest.parent.exists() else []
    olds = [p for p in olds if (p / STATE_FILE).exists()]
    if not dest.exists() and olds:
        os.rename(olds[-1], dest)
        return dest
    raise FileNotFoundError(f"no checkpoint at {dest} (missing {STATE_FILE})")


def save_checkpoint(
    directory: str | os.PathLike,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    step: int = 0,
    extra_state: dict[str, Any] | None = None,
    tokenizer: Any = None,
    learner_state: dict[str, Any] | None = None,
    learner_config: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint to ``directory`` atomically (temp sibling, fsync, rename)."""
    dest = Path(directory).absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(_tmp_prefix(dest) + "*"):  # left by a killed save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = dest.parent / f"{_tmp_prefix(dest)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        with _no_progress_bars():  # a bar per save would break the run's own bar
            cast("PreTrainedModel", model).save_pretrained(tmp)  # an HF model
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        state = {
            "step": step,
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(),
            "extra_state": extra_state or {},
            "learner": learner_state or {},
        }
        torch.save(state, tmp / STATE_FILE)
        if learner_config is not None:
            (tmp / CONFIG_FILE).write_text(json.dumps(learner_config, indent=2, default=str))
        _fsync_tree(tmp)
        old = None
        if dest.exists():
            old = dest.parent / f"{_old_prefix(dest)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.rename(dest, old)
        os.rename(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        fd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def load_model_weights(model: nn.Module, directory: str | os.PathLike) -> None:
    """Load the safetensors weights of a ``save_pretrained`` directory into ``model`` in place.

    Keys missing from the files are accepted only where they alias a loaded parameter (tied
    embeddings); anything else missing or unexpected is an error.
    """
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {directory}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    result = model.load_state_dict(state, strict=False)
    loaded_ids = {id(p) for n, p in model.named_parameters(remove_duplicate=False) if n in state}
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = [k for k in result.missing_keys if k not in params or id(params[k]) not in loaded_ids]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"checkpoint {directory} does not match {type(model).__name__}: missing {missing[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )


def load_checkpoint(
    directory: str | os.PathLike,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Restore model weights, optimizer, scheduler and RNG states from a checkpoint.

    Returns the state dict: ``step``, ``extra_state``, ``learner`` (counters), ``rng``.
    """
    path = resolve_checkpoint(directory)
    load_model_weights(model, path)
    state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(state["optimizer"])  # moves state to the params' device
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng:
        set_rng_state(state["rng"])
    return state
