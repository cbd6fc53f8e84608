"""Training curves of a run: ``python -m algos.plot RUN_DIR [RUN_DIR ...] [--out FILE.png]``.

Reads ``RUN_DIR/metrics.jsonl`` and draws one panel per quantity (reward, resolved rate,
length, entropy, clip fraction, KL, filtered fraction; the loss for RFT runs); several runs are
overlaid (e.g. DAPO vs GRPO). Missing quantities are skipped.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

from algos.loop.metrics import read_metrics

PANELS = (
    ("reward", ("reward_mean",)),
    ("resolved rate", ("resolved_rate",)),
    ("hack rate (flagged / rewarded)", ("hack_rate",)),
    ("validation pass@1", ("val_pass1",)),
    ("length (turns)", ("turns_mean",)),
    ("response tokens", ("response_tokens_mean",)),
    ("entropy", ("entropy",)),
    ("clip fraction", ("clip_frac",)),
    ("KL", ("kl", "approx_kl")),
    ("filtered fraction", ("filtered_frac",)),
    ("loss", ("loss", "nll")),
)


def _x(row: dict) -> float:
    return row.get("iteration", row.get("step", 0))


def plot_runs(
    run_dirs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None
) -> Path:
    """Write the panels of every run to ``out`` (PNG); returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [
        (labels[i] if labels else Path(d).name, read_metrics(d)) for i, d in enumerate(run_dirs)
    ]
    panels = []
    for title, keys in PANELS:
        for key in keys:
            if any(
                any(
                    key in r and isinstance(r[key], int | float) and math.isfinite(r[key])
                    for r in rows
                )
                for _, rows in runs
            ):
                panels.append((title, key))
                break
    if not panels:
        raise ValueError(f"no plottable metrics in {[str(d) for d in run_dirs]}")
    cols = 3
    n_rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(4.2 * cols, 3.0 * n_rows), squeeze=False)
    for ax, (title, key) in zip(axes.flat, panels, strict=False):
        for label, rows in runs:
            pts = [
                (_x(r), r[key])
                for r in rows
                if isinstance(r.get(key), int | float) and math.isfinite(r[key])
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", markersize=3, label=label)
        ax.set_title(f"{title} ({key})", fontsize=9)
        ax.set_xlabel("iteration" if "iteration" in runs[0][1][0] else "step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if len(runs) > 1:
        axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m algos.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", help="run directories holding metrics.jsonl")
    p.add_argument("--out", default=None, help="PNG path (default: RUN_DIR/curves.png)")
    p.add_argument("--labels", default=None, help="comma-separated legend labels")
    args = p.parse_args(argv)
    for d in args.run_dirs:
        if not (Path(d) / "metrics.jsonl").is_file():
            raise SystemExit(f"{d}: no metrics.jsonl; is it a run directory?")
    out = args.out or str(Path(args.run_dirs[0]) / "curves.png")
    labels = args.labels.split(",") if args.labels else None
    print(plot_runs(args.run_dirs, out, labels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
