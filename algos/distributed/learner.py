"""``DistributedLearner``: :class:`algos.learner.learner.Learner` under torchrun (FSDP2, DP x CP).

A subclass, so ``algos/learner/learner.py`` stays the one learner. Every rank calls ``train_step`` with
the SAME full list of samples (the rollout driver's batch); then

- the base class computes the global loss-token count from that full list (exactly the
  all-reduced count of the per-rank shares, without a collective);
- ``_micro_batches`` keeps this DP rank's samples only (round-robin);
- ``_batch_logprobs`` runs the model between the FSDP root's hooks (:func:`fsdp.call_model`)
  and, with CP > 1, on this rank's zig-zag shard of every packed row with ring attention; the
  shard's token log-probs are all-gathered over the CP group (differentiably) so the loss code
  sees whole rows. Every CP rank then computes the same loss; the gather's backward averages
  the CP copies of the gradient, so the summed FSDP gradient is exact.

Use :func:`make_learner` in entry points: it returns the plain Learner for one process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from algos.distributed import context_parallel as cp_mod
from algos.distributed.fsdp import (
    DistContext,
    call_model,
    load_checkpoint,
    save_checkpoint,
    setup_distributed,
    shard_model,
)
from algos.learner.learner import Learner
from algos.learner.learner_config import LearnerConfig
from algos.learner.logprobs import hidden_states, lm_head, token_logprobs
from algos.learner.samples import MicroBatch, Sample

_EXTRA = "learner_extra.pt"


class _GatherCP(torch.autograd.Function):
    """all_gather over the CP group. Every CP rank computes the same loss from the gathered
    rows, so backward averages the CP copies of the gradient (sum / CP) and keeps its slice."""

    @staticmethod
    def forward(ctx, x: Tensor, group) -> Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[dist.get_rank(ctx.group)] / dist.get_world_size(ctx.group), None


class DistributedLearner(Learner):
    """Learner whose model (and reference model) are FSDP2-sharded over ``ctx``'s mesh."""

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig,
        ctx: DistContext,
        *,
        ref_model: nn.Module | None = None,
        tokenizer: Any = None,
    ):
        self.ctx = ctx
        if ctx.cp > 1:
            cp_mod.use_cp_attention(model)
            if ref_model is not None:
                cp_mod.use_cp_attention(ref_model)
        # On CUDA, bf16 through FSDP2's mixed precision: parameters gathered in bf16 once per
        # layer (no per-op autocast casts), float32 master weights and gradient reduction.
        low = torch.bfloat16 if config.bf16 and ctx.device.type == "cuda" else None
        model = shard_model(
            model, ctx, activation_checkpointing=config.grad_checkpointing, param_dtype=low
        )
        if ref_model is not None:
            ref_model = shard_model(ref_model, ctx)
        super().__init__(model, config, ref_model=ref_model, tokenizer=tokenizer)

    def _micro_batches(self, samples: Sequence[Sample]) -> list[MicroBatch]:
        if len(samples) < self.ctx.dp:
            raise ValueError(
                f"{len(samples)} samples for {self.ctx.dp} data-parallel ranks: every rank "
                "needs at least one"
            )
        mine = self.ctx.split_for_dp(list(range(len(samples))))
        batches = super()._micro_batches([samples[i] for i in mine])
        for mb in batches:  # indices back into the caller's full list
            mb.sample_indices = [mine[i] for i in mb.sample_indices]
        # FSDP collectives run per forward/backward: every rank must run as many micro-batches.
        # Pad with copies of the last one whose loss mask is 0 (no loss, no gradient).
        n = torch.tensor(float(len(batches)))
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        while len(batches) < int(n):
            last = batches[-1]
            batches.append(dataclasses.replace(last, loss_mask=torch.zeros_like(last.loss_mask)))
        return batches

    @torch.no_grad()
    def compute_logprobs(
        self, samples: Sequence[Sample], model: nn.Module | None = None, *, loss_only: bool = False
    ):
        # None where another DP rank owns it
        local = super().compute_logprobs(samples, model, loss_only=loss_only)
        if self.ctx.dp == 1:
            return local
        parts: list[Any] = [None] * self.ctx.dp
        dist.all_gather_object(parts, local, group=self.ctx.dp_group)
        return [next(p[i] for p in parts if p[i] is not None) for i in range(len(samples))]

    def _batch_logprobs(
        self, model: nn.Module, mb: MicroBatch, with_entropy: bool, loss_only: bool = False
    ):
        if self.ctx.cp == 1:
            return call_model(
                model, lambda m: Learner._batch_logprobs(self, m, mb, with_entropy, loss_only)
            )
        # context parallel: every position (the loss reads its tokens only, so the same loss)
        lp_rows, ent_rows = call_model(model, self._cp_rows, mb, with_entropy)
        lp = lp_rows.reshape(-1)[mb.gather_index]
        ent = ent_rows.reshape(-1)[mb.gather_index] if ent_rows is not None else None
        return lp, ent

    def _cp_rows(self, model: nn.Module, mb: MicroBatch, with_entropy: bool):
        """Row log-probs ``[R, L]`` (``[:, t] = log p(x_t | x_<t)``) computed on CP shards."""
        cfg, ctx = self.config, self.ctx
        r, length = mb.input_ids.shape
        # targets on the unsplit row: position t predicts token t+1 (first token of a packed
        # sequence gets a cross-sequence value that the loss mask zeroes, as in the base class)
        tgt = torch.zeros_like(mb.input_ids)
        tgt[:, :-1] = mb.input_ids[:, 1:]
        sh = cp_mod.shard_packed_batch(
            {
                "input_ids": mb.input_ids,
                "seq_ids": mb.segment_ids,
                "position_ids": mb.position_ids,
                "targets": tgt,
            },
            ctx.cp_rank,
            ctx.cp,
            pad_values={"targets": 0},
        )
        autocast = (
            torch.autocast(sh["input_ids"].device.type, dtype=torch.bfloat16)
            if cfg.bf16
            else torch.autocast("cpu", enabled=False)
        )
        with cp_mod.cp_attention_context(ctx.cp_group, sh["global_index"], sh["seq_ids"]):
            with autocast:
                h = hidden_states(model, sh["input_ids"], position_ids=sh["position_ids"])
        weight, bias = lm_head(model)
        out = token_logprobs(
            h,
            weight,
            sh["targets"],
            bias=bias,
            temperature=cfg.temperature,
            chunk_size=cfg.logprob_chunk_size,
            return_entropy=with_entropy,
            compute_dtype=torch.bfloat16 if cfg.bf16 and h.is_cuda else None,
        )
        lp, ent = out if isinstance(out, tuple) else (out, None)

        def whole(x: Tensor) -> Tensor:
            parts = _GatherCP.apply(x, ctx.cp_group)
            nxt = cp_mod.unshard(list(parts.unbind(0)), length, ctx.cp)  # [R, L] next-token
            pad = torch.zeros(r, 1, dtype=nxt.dtype, device=nxt.device)
            return torch.cat([pad, nxt[:, :-1]], 1)

        return whole(lp), (whole(ent) if ent is not None else None)

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(
        self, directory: str | os.PathLike, extra_state: dict[str, Any] | None = None
    ) -> None:
        """Sharded DCP save (every rank writes its shards) + scheduler/step/extra from rank 0.

        ``fsdp.export_hf(directory, out)`` turns it into one HF folder.
        """
        save_checkpoint(
            directory,
            self.model,
            self.optimizer,
            self.ctx,
            extra={"step": self.step, "skipped_steps": self.skipped_steps},
        )
        if self.ctx.is_main:
            torch.save(
                {"scheduler": self.scheduler.state_dict(), "extra_state": extra_state},
                Path(directory) / _EXTRA,
            )
        self.ctx.barrier()

    def load_checkpoint(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Load a checkpoint saved by :meth:`save_checkpoint` with any number of processes."""
        meta = load_checkpoint(directory, self.model, self.optimizer, self.ctx)
        extra = torch.load(Path(directory) / _EXTRA, weights_only=False)
        self.scheduler.load_state_dict(extra["scheduler"])
        self.step = int(meta["step"])
        self.skipped_steps = int(meta.get("skipped_steps", 0))
        return extra["extra_state"] or {}


def make_learner(
    model: nn.Module,
    config: LearnerConfig,
    *,
    cp: int = 1,
    ref_model: nn.Module | None = None,
    tokenizer: Any = None,
) -> Learner:
    """A plain :class:`Learner` for one process; a :class:`DistributedLearner` under torchrun."""
    ctx = setup_distributed(cp=cp)
    if not ctx.distributed:
        # the reference model goes with the policy: its log-probs are taken on the same batches
        if ref_model is not None:
            ref_model.to(ctx.device)
        return Learner(model.to(ctx.device), config, ref_model=ref_model, tokenizer=tokenizer)
    return DistributedLearner(model, config, ctx, ref_model=ref_model, tokenizer=tokenizer)
