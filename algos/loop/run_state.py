"""Run state on disk and across ranks: checkpoints (single, sharded), resume, Ctrl-C, seeding."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from algos.distributed.fsdp import DistContext
from algos.learner.learner_config import PolicyLearner

CHECKPOINT_DIR = "checkpoint"
SOLVE_RATES_FILE = "solve_rates.json"


class InterruptGuard:
    """SIGINT handling: outside a critical section Ctrl-C raises KeyboardInterrupt at once;
    inside (an optimiser step, a checkpoint save) it is deferred to the section's end."""

    def __init__(self) -> None:
        self._critical = 0
        self._pending = False
        self._previous: Any = None

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self._critical:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1
        if self._pending and not self._critical:
            self._pending = False
            raise KeyboardInterrupt


def checkpoint_due(done: int, total: int, every: int) -> bool:
    """Whether a training loop saves after unit ``done`` of ``total`` (an RL iteration, an RFT
    step): after the last one, and every ``every`` (``checkpoint_every``; 0: the last only)."""
    return done == total or bool(every and done % every == 0)


def save_interrupted(
    save: Callable[[], None],
    at: str,
    algo: str,
    run_dir: Path,
    checkpoint_dir: Path,
    rank: int | None = None,
) -> None:
    """Ctrl-C's end of a training loop (RL and RFT): say where it stopped (``at``), ``save`` a
    checkpoint and print the command that continues the run; the caller then re-raises the
    KeyboardInterrupt (its ``main`` exits 130)."""
    who = "" if rank is None else f"[rank {rank}] "
    print(f"\n{who}interrupted: saving a checkpoint at {at}", file=sys.stderr)
    save()
    print(
        f"checkpoint written to {checkpoint_dir}; continue with: "
        f"python -m algos.{algo} --resume {run_dir}",
        file=sys.stderr,
    )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (pickled; no-op without a process group)."""
    if not torch.distributed.is_initialized():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def is_sharded_checkpoint(path: Path) -> bool:
    """A DistributedLearner checkpoint (DCP shards + its extra state)."""
    return (path / ".metadata").exists() and (path / "learner_extra.pt").exists()


def find_checkpoint(directory: Path) -> Path | None:
    """The checkpoint to resume from: sharded (or its copy kept by an interrupted sharded save)
    or single-process (``algos.learner.checkpoint``'s layout); ``None`` when there is none."""
    from algos.learner.checkpoint import resolve_checkpoint

    for path in (directory, directory.with_name(f".{directory.name}.old-dcp")):
        if is_sharded_checkpoint(path):
            return path
    try:
        return resolve_checkpoint(directory)
    except FileNotFoundError:
        return None


def load_sharded_into(learner: PolicyLearner, ckpt: Path) -> dict[str, Any]:
    """Load a sharded checkpoint (any world size) into a single-process Learner; returns its
    extra state. DCP reshards the weights and optimizer state on load."""
    from algos.distributed import fsdp

    meta = fsdp.load_checkpoint(ckpt, learner.model, learner.optimizer, DistContext())
    extra = torch.load(ckpt / "learner_extra.pt", weights_only=False)
    learner.scheduler.load_state_dict(extra["scheduler"])
    learner.step = int(meta["step"])
    learner.skipped_steps = int(meta.get("skipped_steps", 0))
    return extra["extra_state"] or {}


def save_sharded(
    learner: PolicyLearner, dest: Path, dist: DistContext, extra: dict[str, Any]
) -> None:
    """A DistributedLearner's DCP save into a temporary sibling of ``dest``, then renamed into
    place by rank 0, so a run killed mid-save keeps its previous checkpoint (as the
    single-process save does). Collective: every rank calls it."""
    tmp, old = dest.with_name(f".{dest.name}.tmp-dcp"), dest.with_name(f".{dest.name}.old-dcp")
    if dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    learner.save_checkpoint(tmp, extra_state=extra)  # ends with a barrier
    if dist.is_main:
        if dest.exists():
            os.rename(dest, old)
        os.rename(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def load_checkpoint_state(learner: PolicyLearner, directory: Path) -> dict[str, Any] | None:
    """Load ``directory``'s checkpoint (single-process or sharded, any world size) into
    ``learner``; returns the extra state saved with it, or ``None`` when there is none."""
    from algos.config import ConfigError

    ckpt = find_checkpoint(directory)
    if ckpt is None:
        return None
    distributed = hasattr(learner, "ctx")  # a DistributedLearner
    if is_sharded_checkpoint(ckpt):
        return learner.load_checkpoint(ckpt) if distributed else load_sharded_into(learner, ckpt)
    if distributed:
        raise ConfigError(
            f"{ckpt} was written by a single process (Hugging Face format); resume it "
            "without torchrun, or start a new run from its weights with --policy "
            f"{ckpt}"
        )
    return learner.load_checkpoint(ckpt)


def write_solve_rates(run_dir: Path, solve_counts: dict[str, list[int]]) -> None:
    """``solve_rates.json``: per task its attempts, resolved runs and rate (what
    ``solve_rates=`` of a stage-2 run reads)."""
    rates = {
        t: {"attempts": a, "resolved": r, "rate": r / a if a else 0.0}
        for t, (a, r) in sorted(solve_counts.items())
    }
    (run_dir / SOLVE_RATES_FILE).write_text(json.dumps(rates, indent=1))


def set_aside(path: Path) -> Path | None:
    """Rename an earlier run's ``path`` (a new run started in the same run dir) to
    ``NAME.N.old``, the first free N, so its rows are neither mixed with the new run's nor
    lost; the new name, or None when there was no such file."""
    if not path.is_file():
        return None
    n = 1
    while (old := path.with_name(f"{path.name}.{n}.old")).exists():
        n += 1
    path.rename(old)
    print(f"{path} is from an earlier run (no --resume): moved to {old.name}", file=sys.stderr)
    return old
