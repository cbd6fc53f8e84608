"""Asynchronous RL learns as the synchronous loop does: on ToyKeyword-v0 (reward 1 when the reply
contains "w"; about 15% at the start) DAPO with ``--max-staleness 1`` reaches the same final
reward as with ``--max-staleness 0``: both saturate the toy."""

from __future__ import annotations

from pathlib import Path

import pytest

from algos import dapo
from algos.loop.metrics import read_metrics

pytestmark = pytest.mark.slow  # two 32-iteration runs: 1-4 minutes on 2 cores

TOY = Path(__file__).resolve().parents[2] / "algos" / "presets" / "toy_keyword.yaml"
ARGS = [
    "--config",
    str(TOY),
    # one optimiser step per iteration, so a version is an iteration and K = 1 means one behind
    "--max-steps-per-iteration",
    "1",
    # At 1e-2 a K = 1 run can hover near 0.85 instead of saturating (one step per iteration on
    # one-step-old samples overshoots); at 5e-3 every seed tried (1-10) saturated by iteration 24.
    "--lr",
    "5e-3",
    "--seed",
    "0",
    "--save-episodes",
    "0",
    # K = 1 trains on samples one step old: weight their tokens by the learner/sampler ratio
    # (a no-op for K = 0, whose engine is the learner's module)
    "--off-policy-correction",
    "tis",
]
ITERATIONS = 32  # K = 1 lags K = 0 by a few iterations on the way up; both saturate by 24
LAST = 3  # the final reward: the mean of the last LAST iterations' episodes


def final_reward(run: Path) -> tuple[float, int, float]:
    rows = read_metrics(run)
    assert len(rows) == ITERATIONS
    last = rows[-LAST:]
    n = int(sum(r["episodes"] for r in last))
    return sum(r["reward_mean"] * r["episodes"] for r in last) / n, n, rows[0]["reward_mean"]


def test_k1_reaches_the_synchronous_final_reward(tmp_path: Path):
    finals = {}
    for k in (0, 1):
        run = tmp_path / f"k{k}"
        assert (
            dapo.main(
                [
                    *ARGS,
                    "--max-staleness",
                    str(k),
                    "--iterations",
                    str(ITERATIONS),
                    "--run-dir",
                    str(run),
                ]
            )
            == 0
        )
        finals[k] = final_reward(run)
        if k:
            rows = read_metrics(run)
            assert all(r["staleness_max"] <= 1 for r in rows if r["staleness_hist"])
    (r0, n0, start0), (r1, n1, start1) = finals[0], finals[1]
    print(f"final reward: K=0 {r0:.3f} (n={n0}), K=1 {r1:.3f} (n={n1})")
    assert start0 < 0.35 and start1 < 0.35  # the behaviour is rare at first ...
    assert r0 > start0 + 0.3 and r1 > start1 + 0.3  # ... both runs learned it
    # The toy saturates: the policy says "w" nearly always once learned, and the learned state is
    # stable (a saturated group has no mixed rewards, so no step moves it). Across seeds the
    # run-to-run spread of the final reward comes from where the policy is, not from binomial
    # noise, so the bound is on that: both at least 0.9 and within 0.1 of each other. A K = 1
    # learner that lags or oscillates below saturation fails it.
    assert r0 >= 0.9 and r1 >= 0.9, (r0, r1)
    assert abs(r1 - r0) <= 0.1, (r0, r1)
