"""RFT's run: trajectories rolled out or read, the resolved ones kept, SFT steps (``algos.rft``)."""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algos.config import ConfigError, save_config, to_dict
from algos.config.rft import RFTConfig
from algos.learner.samples import Sample
from algos.loop.format_probe import FormatProbe
from algos.loop.metrics import MetricsLogger
from algos.loop.run_state import (
    CHECKPOINT_DIR,
    InterruptGuard,
    checkpoint_due,
    save_interrupted,
    seed_everything,
)
from algos.loop.trainer_state import LearnerFactory, default_learner_factory
from algos.policy import Policy, build_policy, load_policy_model
from algos.report import save_iteration_episodes
from algos.rollout.collect import RolloutSpec, run_rollouts
from algos.rollout.hack_monitor import HackMonitor
from algos.rollout.scoring import (
    Counters,
    check_episode_errors,
    count_env_failure,
    count_rollout_error,
    episode_samples,
)
from algos.rollout.task_source import env_tasks

if TYPE_CHECKING:
    from agents.trajectory import Trajectory

DATA_FILE = "rft_data.jsonl"  # the kept trajectories, reused by --resume


def collect(
    cfg: RFTConfig, policy: Policy | None, run_dir: Path | None = None
) -> tuple[list[Any], int]:
    """``(kept trajectories, how many were read or rolled out)``; rolled-out episodes are saved
    to ``run_dir`` as iteration 1 of the run (``save_episodes``; read files are not copied)."""
    from agents.trajectory import Trajectory

    spec = RolloutSpec.from_config(cfg)
    tasks: list[Any] | None = None  # the env's tasks, built once: the pool and the monitor
    if cfg.trajectories:
        trajs = [t for path in cfg.trajectories for t in Trajectory.load_jsonl(path)]
    else:
        assert policy is not None
        tasks = env_tasks(cfg.env, spec.env_kwargs)
        pool = cfg.tasks or [t.instance_id for t in tasks]
        policy.model.eval()
        trajs = run_rollouts(spec, policy.require_engine(), pool, cfg.runs_per_task, cfg.seed)
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
    if tasks is None:
        try:
            tasks = env_tasks(cfg.env, spec.env_kwargs)
        except Exception as e:  # noqa: BLE001 - read trajectories of an env not built here
            print(
                f"rft: hack monitor without task texts ({type(e).__name__}: {e})", file=sys.stderr
            )
            tasks = []
    monitor = HackMonitor.build(cfg.hack_policy, cfg.hack_action, cfg.hack_penalty, tasks)
    hacks = Counters()
    kept = monitor.keep_for_sft(kept, hacks)
    if hacks.hack_flagged:
        print(
            f"rft: hack monitor flagged {hacks.hack_flagged} of {hacks.rewarded} resolved "
            f"trajectories ({hacks.hack_masked} left out); their signals are in rft_data's reports",
            file=sys.stderr,
        )
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


def training_data(
    cfg: RFTConfig, policy: Policy, run_dir: Path, reuse: bool
) -> tuple[list[Trajectory], list[Sample]]:
    """RFT's data: the resolved, token-exact trajectories (rolled out or read, then saved to
    ``DATA_FILE``; a resumed run reads that file back) and their samples."""
    from agents.trajectory import Trajectory

    data_file = run_dir / DATA_FILE
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
    return kept, samples


def epoch_batch(
    samples: list[Sample], batch_size: int, seed: int, epoch: int, k: int
) -> list[Sample]:
    """The ``k``-th batch of ``epoch``: a seeded shuffle per epoch, so a resumed run takes the
    batches the interrupted one would have."""
    order = list(range(len(samples)))
    random.Random(seed + epoch).shuffle(order)
    return [samples[j] for j in order[k * batch_size : (k + 1) * batch_size]]


def train_rft(
    cfg: RFTConfig,
    *,
    policy: Policy | None = None,
    learner_factory: LearnerFactory = default_learner_factory,
) -> list[dict[str, Any]]:
    """The whole RFT run; returns one metrics row per optimiser step."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or cfg.rollout_backend != "threads":
        raise ConfigError(
            "RFT runs in one process with rollout_backend=threads; run it without torchrun "
            f"(WORLD_SIZE={os.environ.get('WORLD_SIZE', '1')}, rollout_backend="
            f"{cfg.rollout_backend!r})"
        )
    run_dir = cfg.resolve_run_dir("rft")
    run_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)
    reuse = cfg.resume and (run_dir / DATA_FILE).exists()
    if policy is None:
        if cfg.trajectories or reuse:  # no rollouts: no engine needed
            model, tokenizer, path = load_policy_model(
                cfg.policy, run_dir, cfg.seed, cfg.yarn_factor
            )
            policy = Policy(model=model, tokenizer=tokenizer, path=path)
        else:
            policy = build_policy(cfg, run_dir)
    save_config(cfg, run_dir)
    kept, samples = training_data(cfg, policy, run_dir, reuse)
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
                    batch = epoch_batch(samples, cfg.batch_size, cfg.seed, epoch, k)
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
