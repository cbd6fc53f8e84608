"""Rejection fine-tuning, Nebius stage 0: SFT on the policy's own passing runs.

The method: docs/methods.md#rft.

``python -m algos.rft --rollout-model oracle --tasks ...`` or ``--trajectories a.jsonl b.jsonl``.

1. Trajectories: roll out ``runs_per_task`` episodes per task with the policy's engine (or
   ``rollout_model``) driven by the built-in agent or your own program (``--agent``), or read
   trajectory JSONL files (``--trajectories``, e.g. from ``python -m agents.evaluate``);
   rolled-out episodes (up to ``save_episodes``, passing or not) are saved as iteration 1 in
   ``RUN_DIR/episodes/`` (``python -m algos.report RUN_DIR``);
2. keep the resolved, token-exact ones (saved to ``RUN_DIR/rft_data.jsonl``, which ``--resume``
   reuses);
3. SFT on policy tokens only, turns that were invalid actions masked out of the loss
   (``Trajectory.to_sample_arrays(mask_invalid=True)``); ``batch_size`` trajectories per step,
   token-mean NLL over the batch, AdamW (wd 0.1), 10 warm-up steps, cosine to 0, 1 epoch;
4. with ``probe_contexts``, after each epoch (and before the first) the share of sampled replies
   that parse as one action on turn contexts of the kept trajectories (``algos.loop.format_probe``),
   logged as ``format_valid``; with ``format_patience``, ``epochs`` is a maximum and the run
   stops once that share has not risen for that many epochs (a small model learning the format
   needs more than a fixed handful of steps, and no more once it has it).

How this departs from the paper: the warm-up is shortened to ``total_steps - 1`` when the run
has fewer steps than that (tiny runs); sequences longer than ``max_context_tokens`` are
truncated (counted) rather than dropped.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algos.config import ConfigError, parse_config, save_config, to_dict
from algos.engine import Policy, build_policy, load_policy_model
from algos.learner.learner_config import LearnerConfig
from algos.learner.samples import Sample
from algos.loop.format_probe import PROBES, format_valid_rate, greedy_match_rate, turn_contexts
from algos.loop.metrics import METRICS_FILE, MetricsLogger, format_table
from algos.loop.run_state import (
    CHECKPOINT_DIR,
    InterruptGuard,
    checkpoint_due,
    save_interrupted,
    seed_everything,
)
from algos.loop.trainer import LearnerFactory, default_learner_factory
from algos.report import save_iteration_episodes
from algos.rollout.collect import RolloutSpec, env_task_ids, run_rollouts
from algos.rollout.scoring import (
    Counters,
    EpisodesFailed,
    check_episode_errors,
    count_env_failure,
    count_rollout_error,
    episode_samples,
)
from algos.run_config import EPISODE_SAMPLING, RunConfig
from swe_gym.errors import unknown_choice

DATA_FILE = "rft_data.jsonl"
RESULT_COLUMNS = (
    ("step", "step", ".0f"),
    ("epoch", "epoch", ".0f"),
    ("nll", "nll", ".4f"),
    ("lr", "lr", ".2e"),
    ("grad_norm", "grad_norm", ".3f"),
    ("format_valid", "format_valid", ".3f"),
    ("seqs", "sequences", ".0f"),
    ("tokens", "loss_tokens", ".0f"),
    ("time_s", "time_s", ".1f"),
)


@dataclass
class RFTConfig(RunConfig):
    """Rejection fine-tuning (defaults: Nebius RFT, docs/methods.md#rft)."""

    trajectories: list[str] | None = None
    """Trajectory JSONL files to train on instead of rolling out (comma-separated)."""
    runs_per_task: int = 10
    """Episodes per task when rolling out (Nebius: 10)."""
    mask_invalid: bool = True
    """Mask turns whose action the env rejected (format errors) out of the loss."""
    epochs: int = 1
    """Passes over the kept trajectories."""
    batch_size: int = 64
    """Trajectories per optimiser step."""
    lr: float = 5e-6
    """Peak AdamW learning rate."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    warmup_steps: int = 10
    """Linear warm-up steps, then cosine to 0."""
    grad_clip: float = 1.0
    """Max gradient norm."""
    yarn_factor: float | None = None
    """Extend the rope with YaRN by this factor."""
    save_episodes: int | None = 64
    """Rolled-out episodes written to RUN_DIR/episodes/iter-000001.jsonl (as the RL loop saves an
    iteration's; python -m algos.report RUN_DIR shows them); 0 saves none, none saves all."""
    probe_contexts: int = 0
    """Turn contexts of the kept trajectories the format probe samples a reply for, before the
    first epoch and after each (format_valid in the metrics); 0: no probe."""
    probe: str = "greedy"
    """Format probe (algos/loop/format_probe.py): greedy (one forward pass: the share of valid turns
    greedy decoding reproduces, a lower bound) or sample (sampled replies parsed as the env
    would: the format-valid rate itself, minutes per probe on a CPU)."""
    format_patience: int = 0
    """Stop after this many epochs in a row without a rise of format_valid (epochs is then a
    maximum; needs probe_contexts); 0: run every epoch."""
    save_episodes_sampling: str = "groups"
    """Which episodes are saved when there are more than save_episodes: groups (whole tasks at
    random) or random (episodes at random)."""
    tree_packing: bool = True
    """Shared-prefix packing in the learner: a task's runs in one batch share its prompt (found
    from the token ids), computed once, each run's continuation attending to it (algos.learner.tree);
    same loss and gradients as plain packing. The metrics rows show tokens_computed against
    tokens_plain."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("runs_per_task", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0; got {self.warmup_steps}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0; got {self.lr}")
        if self.save_episodes is not None and self.save_episodes < 0:
            raise ConfigError(f"save_episodes must be >= 0 or none (all); got {self.save_episodes}")
        if self.save_episodes_sampling not in EPISODE_SAMPLING:
            raise unknown_choice(
                "save_episodes_sampling", self.save_episodes_sampling, EPISODE_SAMPLING
            )
        for path in self.trajectories or []:
            if not Path(path).is_file():
                raise ConfigError(f"trajectory file {path!r} does not exist")
        if self.probe_contexts < 0 or self.format_patience < 0:
            raise ConfigError("probe_contexts and format_patience must be >= 0")
        if self.probe not in PROBES:
            raise unknown_choice("probe", self.probe, PROBES)
        if self.format_patience and not self.probe_contexts:
            raise ConfigError("format_patience stops on the format probe: set probe_contexts too")
        if self.trajectories and self.agent:
            raise ConfigError(
                f"agent={self.agent!r} runs the rollouts, but trajectories="
                f"{self.trajectories} replace them: pass one or the other"
            )

    def learner_config(self, total_steps: int) -> LearnerConfig:
        warmup = min(self.warmup_steps, max(0, total_steps - 1))
        return LearnerConfig(
            lr=self.lr,
            weight_decay=self.weight_decay,
            grad_clip=self.grad_clip,
            warmup_steps=warmup,
            schedule="cosine",
            total_steps=total_steps,
            min_lr_ratio=0.0,
            micro_batch_tokens=self.micro_batch_tokens,
            bf16=self.bf16,
            grad_checkpointing=self.grad_checkpointing,
            loss="sft",
            agg_mode="token-mean",
            temperature=self.temperature,
            tree_packing=self.tree_packing,
        )


def collect(
    cfg: RFTConfig, policy: Policy | None, run_dir: Path | None = None
) -> tuple[list[Any], int]:
    """``(kept trajectories, how many were read or rolled out)``; rolled-out episodes are saved
    to ``run_dir`` as iteration 1 of the run (``save_episodes``; read files are not copied)."""
    from agents.trajectory import Trajectory

    if cfg.trajectories:
        trajs = [t for path in cfg.trajectories for t in Trajectory.load_jsonl(path)]
    else:
        assert policy is not None
        spec = RolloutSpec.from_config(cfg)
        pool = cfg.tasks or env_task_ids(cfg.env, spec.env_kwargs)
        policy.model.eval()
        trajs = run_rollouts(spec, policy.sampler, pool, cfg.runs_per_task, cfg.seed)
        failed = Counters(episodes=len(trajs))
        for t in trajs:
            if not count_rollout_error(t, failed):
                count_env_failure(t, failed)
        check_episode_errors(failed, cfg.max_error_share, "rft rollouts")
        if run_dir is not None and cfg.save_episodes != 0:  # sampled by the initial weights
            save_iteration_episodes(
                run_dir, 1, trajs, 0, cfg.save_episodes, cfg.save_episodes_sampling, cfg.seed
            )
    kept = [t for t in trajs if t.resolved and t.token_exact and t.turns]
    return kept, len(trajs)


def build_samples(cfg: RFTConfig, trajs: Sequence[Any], counters: Counters) -> list[Sample]:
    """SFT samples (advantage 1) with invalid-action turns masked when ``mask_invalid``; an
    episode recorded in several segments (a rewritten gateway history) gives one per segment."""
    out = []
    for i, t in enumerate(trajs):
        out += episode_samples(
            t, 1.0, cfg.max_context_tokens, cfg.mask_invalid, counters, f"{t.task_id}/{i}"
        )
    return out


class FormatProbe:
    """The per-epoch format probe (``probe_contexts``) and its plateau count."""

    def __init__(self, cfg: RFTConfig, policy: Policy, kept: Sequence[Any]):
        self.cfg = cfg
        self.policy = policy
        self.enabled = cfg.probe_contexts > 0
        self.kept = kept
        self.contexts = (
            turn_contexts(kept, cfg.probe_contexts, cfg.seed)
            if self.enabled and cfg.probe == "sample"
            else []
        )
        self.best = -1.0
        self.flat_for = 0  # epochs in a row without a rise

    def __call__(self, epoch: int) -> float:
        t0 = time.perf_counter()
        if self.cfg.probe == "greedy":
            rate = greedy_match_rate(
                self.policy.model, self.kept, self.cfg.probe_contexts, self.cfg.seed
            )
        else:
            rate = format_valid_rate(
                self.policy.model,
                self.policy.tokenizer,
                self.contexts,
                action_format=self.cfg.env_kwargs.get("action_format", "fenced"),
                max_new_tokens=self.cfg.max_new_tokens or 128,
                temperature=self.cfg.temperature,
                seed=self.cfg.seed + epoch,
            )
        self.flat_for = 0 if rate > self.best else self.flat_for + 1
        self.best = max(self.best, rate)
        print(
            f"rft: epoch {epoch}: format_valid ({self.cfg.probe}) {rate:.3f} on "
            f"{self.cfg.probe_contexts} turns ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
        )
        return rate


def train_rft(
    cfg: RFTConfig,
    *,
    policy: Policy | None = None,
    learner_factory: LearnerFactory = default_learner_factory,
) -> list[dict[str, Any]]:
    """The whole RFT run; returns one metrics row per optimiser step."""
    from agents.trajectory import Trajectory

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or cfg.rollout_backend != "threads":
        raise ConfigError(
            "RFT runs in one process with rollout_backend=threads; run it without torchrun "
            f"(WORLD_SIZE={os.environ.get('WORLD_SIZE', '1')}, rollout_backend="
            f"{cfg.rollout_backend!r})"
        )
    run_dir = cfg.resolve_run_dir("rft")
    run_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)
    data_file = run_dir / DATA_FILE
    reuse = cfg.resume and data_file.exists()
    if policy is None:
        if cfg.trajectories or reuse:  # no rollouts: no engine needed
            model, tokenizer, path = load_policy_model(
                cfg.policy, run_dir, cfg.seed, cfg.yarn_factor
            )
            policy = Policy(model=model, tokenizer=tokenizer, path=path)
        else:
            policy = build_policy(cfg, run_dir)
    save_config(cfg, run_dir)
    if reuse:
        kept = Trajectory.load_jsonl(data_file)
        seen = len(kept)
    else:
        kept, seen = collect(cfg, policy, run_dir)
        Trajectory.save_jsonl(kept, data_file)
    if not kept:
        raise ConfigError(
            f"no resolved, token-exact trajectory among {seen}; roll out more runs_per_task, "
            "use a stronger rollout_model, or pass --trajectories with passing runs"
        )
    counters = Counters()
    samples = build_samples(cfg, kept, counters)
    print(
        f"rft: {len(kept)} resolved of {seen} trajectories -> {len(samples)} samples "
        f"({counters.truncated} truncated, {counters.empty} without loss tokens)",
        file=sys.stderr,
    )
    steps_per_epoch = math.ceil(len(samples) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    learner = learner_factory(
        policy.model, cfg.learner_config(total), ref_model=None, tokenizer=policy.tokenizer
    )
    done = 0
    ckpt = run_dir / CHECKPOINT_DIR
    if cfg.resume and (ckpt / "learner_state.pt").exists():
        done = int(learner.load_checkpoint(ckpt)["done_steps"])
        print(f"resumed {run_dir} at step {done}/{total}", file=sys.stderr)
    logger = MetricsLogger(
        run_dir,
        cfg.log,
        to_dict(cfg),
        cfg.wandb_project,
        resume_from=done if cfg.resume else None,
        key="step",
    )
    bar = None
    if cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=done, desc="rft", unit="step", file=sys.stderr)
    rows: list[dict[str, Any]] = []

    def save() -> None:
        learner.save_checkpoint(ckpt, extra_state={"done_steps": done, "algo": "rft"})

    probe = FormatProbe(cfg, policy, kept)
    if probe.enabled and done == 0:
        row0 = {"step": 0, "epoch": 0, "format_valid": probe(0)}
        logger.log(row0)
        rows.append(row0)

    try:
        with InterruptGuard() as guard:
            try:
                while done < total:
                    epoch, k = divmod(done, steps_per_epoch)
                    order = list(range(len(samples)))
                    random.Random(cfg.seed + epoch).shuffle(order)
                    batch = [
                        samples[j] for j in order[k * cfg.batch_size : (k + 1) * cfg.batch_size]
                    ]
                    t0 = time.perf_counter()
                    with guard.critical():
                        metrics = learner.train_step(batch)
                        done += 1
                    row = {
                        "step": done,
                        "epoch": epoch + 1,
                        **metrics,
                        "time_s": time.perf_counter() - t0,
                    }
                    stop = False
                    if probe.enabled and done % steps_per_epoch == 0:  # an epoch ended
                        row["format_valid"] = probe(epoch + 1)
                        stop = probe.flat_for >= cfg.format_patience > 0
                    logger.log(row)
                    rows.append(row)
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(nll=f"{metrics.get('nll', float('nan')):.4f}")
                    if stop:
                        print(
                            f"rft: format_valid has not risen for {probe.flat_for} epoch(s) "
                            f"(best {probe.best:.3f}): stopping after epoch {epoch + 1}",
                            file=sys.stderr,
                        )
                        total = done
                    if checkpoint_due(done, total, cfg.checkpoint_every):
                        with guard.critical():
                            save()
            except KeyboardInterrupt:
                save_interrupted(save, f"step {done}", "rft", run_dir, ckpt)
                raise
    finally:
        if bar is not None:
            bar.close()
        logger.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(
            RFTConfig,
            argv,
            prog="python -m algos.rft",
            description=__doc__.split("\n\n")[0],
            prefix="rft",
        )
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    try:
        rows = train_rft(cfg)
    except KeyboardInterrupt:
        return 130
    except (ConfigError, EpisodesFailed) as e:
        raise SystemExit(f"error: {e}") from None
    print(format_table(rows, RESULT_COLUMNS))
    run_dir = cfg.resolve_run_dir("rft")  # train_rft stored it in cfg: the same folder
    print(f"metrics: {run_dir / METRICS_FILE}; model: {run_dir / CHECKPOINT_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
