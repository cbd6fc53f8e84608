"""The one learner shared by RFT, GRPO and DAPO.

``Learner(model, LearnerConfig(...)).train_step(samples)`` runs one optimiser step on a list of
:class:`~algos.learner.samples.Sample`:

1. reference log-probs (``no_grad``, the reference model) when ``kl_coef > 0`` and the samples
   do not carry them;
2. packing into micro-batches of at most ``micro_batch_tokens`` tokens (sequences concatenated
   in one row, block-diagonal causal attention, ``position_ids`` restarting per sequence);
3. per micro-batch: chunked token log-probs (:mod:`algos.learner.logprobs`), the policy loss chosen by
   name from :mod:`algos.objectives` normalised by the GLOBAL number of loss tokens (or sequences) in
   the step (per token times the off-policy correction's weight, ``off_policy_correction``),
   ``+ kl_coef * KL - entropy_coef * H``, backward (gradients accumulate); the sampler/learner
   mismatch (``mismatch_*``) is measured on the way;
4. gradient-norm clipping, AdamW, LR schedule (linear warm-up, then constant or cosine).

A non-finite loss or gradient norm skips the step (no update, counted in ``skipped_steps``
and logged). RFT = ``loss="sft"``; GRPO = ``loss="ppo"`` with ``kl_coef > 0``; DAPO =
``loss="dapo"`` with ``agg_mode="token-mean"`` (docs/methods.md#dapo). The model is any Hugging Face
causal LM; this module never imports agents or envs.

On CUDA (and only there; the CPU path is unchanged) with ``bf16``: forward/backward on a bf16
copy of the float32 master weights (:mod:`algos.learner.precision`), the log-prob head in bf16 GEMMs
with float32 softmax, packed rows on the varlen flash/cuDNN kernel (:mod:`algos.learner.attention`),
fused AdamW, TF32 for float32 leftovers, Liger's kernels when installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from algos import objectives
from algos.learner.attention import ATTN_NAME, packed_forward, packed_kwargs, use_packed_attention
from algos.learner.checkpoint import load_checkpoint, save_checkpoint
from algos.learner.learner_config import LearnerConfig, LRSchedule
from algos.learner.logprobs import model_token_logprobs
from algos.learner.precision import BF16ComputeCopy, setup_cuda
from algos.learner.samples import MicroBatch, Sample, pack_samples, pad_samples
from algos.learner.tree import (
    TreeMicroBatch,
    pack_trees,
    tree_ready,
    tree_token_logprobs,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)


class _Metrics:
    """Combines per-micro-batch metrics: token-weighted mean; ``*_max``/``*_min`` by max/min."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, metrics: dict[str, float], weight: float) -> None:
        for k, v in metrics.items():
            if k.endswith("_max") or k.endswith("_min"):
                pick = max if k.endswith("_max") else min
                self.sums[k] = pick(self.sums.get(k, v), v)
                self.weights[k] = 1.0
            elif weight > 0:
                self.sums[k] = self.sums.get(k, 0.0) + v * weight
                self.weights[k] = self.weights.get(k, 0.0) + weight

    def result(self) -> dict[str, float]:
        out = {}
        for k, v in self.sums.items():
            if k.endswith("_max") or k.endswith("_min"):
                out[k] = v
            else:
                out[k] = v / self.weights[k]
        return out


class Learner:
    """Owns the model's optimiser, schedule and step counter; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig,
        *,
        ref_model: nn.Module | None = None,
        tokenizer: Any = None,
    ) -> None:
        self.model = model
        self.config = config
        self.ref_model = ref_model
        self.tokenizer = tokenizer
        self.loss_fn = objectives.get_policy_loss_fn(config.loss)
        self.step = 0
        self.skipped_steps = 0
        if config.grad_checkpointing:
            hf = cast("PreTrainedModel", model)  # an HF causal LM (module docstring)
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if getattr(model, "config", None) is not None:
                hf.config.use_cache = False
        if ref_model is not None:
            ref_model.eval()
            ref_model.requires_grad_(False)
        if config.packing and config.packed_attention:
            for m in (model, ref_model):
                if m is not None:
                    use_packed_attention(m)
        # trees need the packed_sdpa kernel; a sharded learner (ctx) splits rows its own way
        self.trees = (
            config.packing
            and config.tree_packing
            and tree_ready(model, ref_model)
            and getattr(self, "ctx", None) is None
        )
        on_cuda = self.device.type == "cuda"
        if on_cuda:
            setup_cuda(model, config.liger)
        use_copy = config.bf16_compute_copy
        if use_copy is None:  # a sharded learner (a ctx) gets it from FSDP2 instead
            use_copy = on_cuda and getattr(self, "ctx", None) is None
        self.compute: BF16ComputeCopy | None = (
            BF16ComputeCopy(model) if config.bf16 and use_copy else None
        )
        params = [p for p in model.parameters() if p.requires_grad]
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": config.weight_decay}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0})
        self.params = params
        # fused: one kernel for the whole update on CUDA (None keeps torch's CPU default)
        self.optimizer = torch.optim.AdamW(
            groups,
            lr=config.lr,
            betas=config.betas,
            eps=config.eps,
            fused=True if on_cuda else None,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            LRSchedule(
                config.warmup_steps, config.schedule, config.total_steps, config.min_lr_ratio
            ),
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ log-probs

    def _micro_batches(self, samples: Sequence[Sample]) -> list[MicroBatch]:
        if self.trees:
            return pack_trees(samples, self.config.micro_batch_tokens, self.config.tree_min_prefix)
        fn = pack_samples if self.config.packing else pad_samples
        return fn(samples, self.config.micro_batch_tokens)

    def _batch_logprobs(
        self, model: nn.Module, mb: MicroBatch, with_entropy: bool, loss_only: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Per-sample ``[S, Tmax]`` log-probs (and entropy) of a micro-batch on the device;
        ``loss_only``: at the loss tokens only (0 elsewhere), the head run on those alone."""
        cfg = self.config
        impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
        mask_dtype = torch.bfloat16 if cfg.bf16 else next(model.parameters()).dtype
        on_cuda = mb.input_ids.is_cuda
        kwargs: dict[str, Any] = {}
        ctx: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        logprob_fn: Callable[..., Tensor | tuple[Tensor, Tensor]] = model_token_logprobs
        if impl == ATTN_NAME and isinstance(mb, TreeMicroBatch):
            kwargs, ctx = mb.model_kwargs(), packed_forward()
            logprob_fn = functools.partial(tree_token_logprobs, mb)
        elif impl == ATTN_NAME and mb.input_ids.shape[0] == 1:
            # per-sequence attention: the boundaries replace the block-diagonal mask; computed
            # here once per micro-batch (one host sync), not in every layer
            kwargs.update(packed_kwargs(mb.segment_ids, cover_padding=on_cuda))
            ctx = packed_forward()
        else:
            kwargs["attention_mask"] = mb.attention_mask(impl, mask_dtype)
        # a bf16 compute copy needs no autocast (its weights are bf16 already)
        low_params = self.compute is not None and model is self.compute.module
        if loss_only:
            kwargs["positions"] = torch.unique(mb.gather_index[mb.loss_mask > 0])
        with ctx:
            out = logprob_fn(
                model,
                mb.input_ids,
                position_ids=mb.position_ids,
                temperature=cfg.temperature,
                chunk_size=cfg.logprob_chunk_size,
                return_entropy=with_entropy,
                autocast_dtype=torch.bfloat16 if cfg.bf16 and not low_params else None,
                head_dtype=torch.bfloat16 if cfg.bf16 and on_cuda else None,
                **kwargs,
            )
        lp_rows, ent_rows = out if isinstance(out, tuple) else (out, None)
        # position 0 of a packed sequence holds the previous sequence's prediction: zero it
        first = torch.zeros_like(mb.gather_index, dtype=torch.bool)
        first[:, 0] = True
        lp = lp_rows.reshape(-1)[mb.gather_index].masked_fill(first, 0.0)
        ent = None
        if ent_rows is not None:
            ent = ent_rows.reshape(-1)[mb.gather_index].masked_fill(first, 0.0)
        return lp, ent

    @torch.no_grad()
    def compute_logprobs(
        self,
        samples: Sequence[Sample],
        model: nn.Module | None = None,
        *,
        loss_only: bool = False,
    ) -> list[list[float]]:
        """Per-token log-probs of each sample under ``model`` (default: the policy), aligned to
        its tokens (``[0] = 0``), in eval mode without gradients; ``loss_only``: at its loss
        tokens only, 0 elsewhere (the old and reference log-probs: what the loss reads)."""
        model = model if model is not None else self.model
        was_training = model.training
        model.eval()
        out: list[list[float] | None] = [None] * len(samples)
        try:
            for mb in self._micro_batches(samples):
                device = next(model.parameters()).device  # the reference model's may differ
                lp, _ = self._batch_logprobs(
                    model, mb.to(device), with_entropy=False, loss_only=loss_only
                )
                for row, i in enumerate(mb.sample_indices):
                    out[i] = lp[row, : len(samples[i])].tolist()
        finally:
            model.train(was_training)
        return out  # type: ignore[return-value]

    def _with_ref_logprobs(self, samples: Sequence[Sample]) -> list[Sample]:
        missing = [i for i, s in enumerate(samples) if s.ref_logprobs is None]
        if not missing:
            return list(samples)
        if self.ref_model is None:
            raise ValueError(
                f"kl_coef={self.config.kl_coef} needs ref_logprobs on every sample or a "
                f"ref_model; sample {samples[missing[0]].sample_id!r} has none"
            )
        ref = self.compute_logprobs([samples[i] for i in missing], self.ref_model, loss_only=True)
        out = list(samples)
        for i, lp in zip(missing, ref, strict=True):
            mask = samples[i].loss_mask
            out[i] = dataclasses.replace(
                samples[i], ref_logprobs=[v * m for v, m in zip(lp, mask, strict=True)]
            )
        return out

    # ------------------------------------------------------------------ training

    def _policy_loss(
        self, lp: Tensor, mb: MicroBatch, norm: dict[str, Any], has_logprobs: bool
    ) -> tuple[Tensor, dict[str, float]]:
        """The configured loss, with the off-policy correction and the behaviour/learner mismatch.

        Behaviour = the rollout engine's log-probs; proximal = the learner's before the step:
        the samples' ``proximal_logprobs`` when recomputed, else this step's own forward (the weights before the optimiser step). In that second case a
        correction's ratio ``pi / pi_prox`` is exactly 1, so a clipped loss never clips: the RL
        configs refuse ``old_logprobs=behaviour`` with a correction and a clipped loss.
        """
        cfg = self.config
        if not has_logprobs:  # sft/pg without sampling log-probs: nothing to compare
            return self.loss_fn(
                lp, mb.old_logprobs, mb.advantages, mb.loss_mask, **norm, **cfg.loss_kwargs
            )
        behaviour = mb.behaviour_logprobs
        proximal = lp.detach() if mb.proximal_logprobs is None else mb.proximal_logprobs
        extra = objectives.mismatch_metrics(proximal, behaviour, mb.loss_mask)
        if cfg.off_policy_correction == "none":
            loss, metrics = self.loss_fn(
                lp, mb.old_logprobs, mb.advantages, mb.loss_mask, **norm, **cfg.loss_kwargs
            )
        else:
            weights, w_metrics = objectives.off_policy_weights(
                proximal, behaviour, mb.loss_mask, kind=cfg.off_policy_correction, cap=cfg.is_cap
            )
            extra.update(w_metrics)
            loss, metrics = self.loss_fn(
                lp,
                proximal,
                mb.advantages,
                mb.loss_mask,
                token_weights=weights,
                **norm,
                **cfg.loss_kwargs,
            )
        metrics.update(extra)
        return loss, metrics

    def train_step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimiser step on ``samples``; returns metrics (floats)."""
        cfg = self.config
        if not samples:
            raise ValueError("train_step needs at least one sample")
        if cfg.loss in objectives.NEEDS_OLD_LOGPROBS:
            lacking = [s.sample_id for s in samples if s.behaviour_logprobs is None]
            if lacking:
                raise ValueError(
                    f"loss {cfg.loss!r} needs behaviour_logprobs (the rollout's); sample "
                    f"{lacking[0]!r} has none"
                )
        if cfg.kl_coef > 0:
            samples = self._with_ref_logprobs(samples)
        t0 = time.perf_counter()
        batches = self._micro_batches(samples)
        global_tokens = sum(s.num_loss_tokens for s in samples)
        global_seqs = sum(1 for s in samples if s.num_loss_tokens > 0)
        with_entropy = cfg.log_entropy or cfg.entropy_coef != 0
        has_logprobs = all(s.behaviour_logprobs is not None for s in samples)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        net = self.model
        if self.compute is not None:
            self.compute.load_master()
            net = self.compute.module.train()
        agg = _Metrics()
        total_loss = 0.0
        bad: str | None = None
        for mb in batches:
            mb = mb.to(self.device)
            # the loss reads its tokens only: the vocabulary-sized head runs on those alone
            lp, ent = self._batch_logprobs(net, mb, with_entropy, loss_only=True)
            norm: dict[str, Any] = {
                "agg_mode": cfg.agg_mode,
                "global_token_count": global_tokens,
                "global_seq_count": global_seqs,
            }
            loss, metrics = self._policy_loss(lp, mb, norm, has_logprobs)
            if cfg.kl_coef > 0:
                assert mb.ref_logprobs is not None  # _with_ref_logprobs gave every sample them
                kl, kl_metrics = objectives.kl_loss(
                    lp, mb.ref_logprobs, mb.loss_mask, kind=cfg.kl_estimator, **norm
                )
                loss = loss + cfg.kl_coef * kl
                metrics.update(kl_metrics)
            if ent is not None:
                if cfg.entropy_coef != 0:
                    loss = loss - cfg.entropy_coef * objectives.agg_loss(
                        ent, mb.loss_mask, cfg.agg_mode, global_tokens, global_seqs
                    )
                metrics["entropy"] = objectives.masked_mean(ent.detach(), mb.loss_mask).item()
            if not torch.isfinite(loss):
                bad = f"non-finite loss {loss.item()}"
                break
            loss.backward()
            if self.compute is not None:
                self.compute.add_grads_to_master()
            total_loss += loss.item()
            agg.add(metrics, weight=float(mb.loss_mask.sum()))

        grad_norm = float("nan")
        if bad is None:
            max_norm = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
            if not math.isfinite(grad_norm):
                bad = f"non-finite gradient norm {grad_norm}"
        lr = float(self.scheduler.get_last_lr()[0])
        if bad is not None:
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_steps += 1
            log.warning(
                "step %d skipped: %s (%d skipped so far)", self.step, bad, self.skipped_steps
            )
        else:
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
        elapsed = time.perf_counter() - t0
        real_tokens = sum(len(s) for s in samples)
        out = agg.result()
        out.update(
            {
                "loss": total_loss if bad is None else float("nan"),
                "grad_norm": grad_norm,
                "lr": lr,
                "step": float(self.step),
                "skipped": float(bad is not None),
                "skipped_steps": float(self.skipped_steps),
                "loss_tokens": float(global_tokens),
                "sequences": float(len(samples)),
                "tokens": float(real_tokens),
                "padded_tokens": float(sum(mb.num_tokens for mb in batches)),
                # shared-prefix packing: tokens the forward ran on vs what plain packing would run
                "tokens_computed": float(sum(mb.num_real_tokens for mb in batches)),
                "tokens_plain": float(real_tokens),
                "micro_batches": float(len(batches)),
                "time_s": elapsed,
                "tokens_per_s": real_tokens / max(elapsed, 1e-9),
            }
        )
        return out

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(
        self, directory: str | os.PathLike, extra_state: dict[str, Any] | None = None
    ) -> None:
        """Atomic HF-format checkpoint + optimizer, scheduler, RNG, step, ``extra_state``."""
        save_checkpoint(
            directory,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            step=self.step,
            extra_state=extra_state,
            tokenizer=self.tokenizer,
            learner_state={"skipped_steps": self.skipped_steps},
            learner_config=dataclasses.asdict(self.config),
        )

    def load_checkpoint(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore everything :meth:`save_checkpoint` wrote; returns the ``extra_state``."""
        state = load_checkpoint(
            directory, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler
        )
        self.step = int(state["step"])
        self.skipped_steps = int(state["learner"].get("skipped_steps", 0))
        return state["extra_state"]
