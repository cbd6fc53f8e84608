"""Rejection fine-tuning, Nebius stage 0: SFT on the policy's own passing runs.

The method: docs/methods.md#rft. The run: ``algos.loop.rft_loop.train_rft``.

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

from collections.abc import Sequence

from algos.config import ConfigError, parse_config
from algos.config.rft import RFTConfig
from algos.loop.metrics import METRICS_FILE, format_table
from algos.loop.rft_loop import train_rft
from algos.loop.run_state import CHECKPOINT_DIR
from algos.rollout.scoring import EpisodesFailed

__all__ = ["RFTConfig", "main"]  # RFTConfig lives in algos.config.rft; imported from here too

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
