"""Guards on what a user of the RL loop relies on, each written against a bug it once let through
(issue 16): refill keeps the samples of every round; a resumed run samples and logs what an
uninterrupted one does; each algorithm's config values reach the loss it runs.

Rollouts come from a scripted model on the toy env (reward 1 iff the reply contains "e"), so
which groups survive the filter is fixed by the test, not by sampling.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agents.models import ScriptedModel
from algos import objectives
from algos.dapo import DAPOConfig
from algos.grpo import GRPOConfig
from algos.loop.metrics import read_metrics
from algos.loop.trainer import Trainer
from algos.policy import Policy, load_policy_model
from algos.rollout import collect as rollouts_mod
from algos.rollout.collect import TaskPool
from tests.algos import toy_run

POOL = ["toy-0", "toy-1", "toy-2", "toy-3"]  # ToyKeyword-v0's default tasks
HIT, MISS = "yes", "no"  # reward 1 / 0 with target "e"
REAL_RUN_ROLLOUTS = rollouts_mod.run_rollouts


def toy_cfg(tmp_path: Path, cls=DAPOConfig, name: str = "run", **kw):
    return toy_run.toy_cfg(
        tmp_path,
        cls,
        name,
        **{
            **dict(
                rollout_model="scripted",
                group_size=2,
                problems_per_iteration=1,
                batch_size=2,
                lr=1e-3,
                iterations=1,
                concurrency=1,
            ),
            **kw,
        },
    )


def scripted_policy(cfg, constant: set[str]) -> Policy:
    """A policy whose rollouts come from a script: tasks in ``constant`` always MISS (their
    group is filtered out), the others alternate HIT, MISS (a group with both rewards)."""
    model, tok, path = load_policy_model("tiny-random", Path(cfg.run_dir))
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def reply(conv):
        task = conv.metadata["task_id"]
        with lock:
            n = calls[task] = calls.get(task, -1) + 1
        return MISS if task in constant or n % 2 else HIT

    return Policy(model, tok, path, engine=ScriptedModel(reply, tokenizer=tok), on_policy=False)


def order(seed: int = 0) -> list[str]:
    """The tasks the trainer's sampler hands out, in order (one epoch)."""
    return TaskPool(POOL, seed).sample(len(POOL))


def record_rollouts(monkeypatch, interrupt_at: int | None = None) -> list[list[str]]:
    """Task ids of every rollout call; ``interrupt_at``: that call (1-based) ends in Ctrl-C
    after its episodes ran, as a SIGINT during rollouts does."""
    calls: list[list[str]] = []

    def spy(spec, sampler, task_ids, *args, **kwargs):
        out = REAL_RUN_ROLLOUTS(spec, sampler, task_ids, *args, **kwargs)
        calls.append(list(task_ids))
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(rollouts_mod, "run_rollouts", spy)
    return calls


def record_steps(trainer: Trainer) -> list[list[str]]:
    """Sample ids of every optimiser step."""
    steps: list[list[str]] = []
    real = trainer.learner.train_step

    def spy(batch):
        steps.append([s.sample_id for s in batch])
        return real(batch)

    trainer.learner.train_step = spy
    return steps


# ------------------------------------------------------------------ refill


@pytest.mark.parametrize("filter_name", ["nonconstant_group", "nonzero_advantage"])
def test_refill_keeps_the_samples_of_every_round(tmp_path: Path, monkeypatch, filter_name):
    """Round 1 keeps one group of two, short of batch_size 4; one refill round keeps another."""
    first, second = order()[:2], order()[2:]
    cfg = toy_cfg(
        tmp_path, problems_per_iteration=2, batch_size=4, max_refill_rounds=2, filter=filter_name
    )
    calls = record_rollouts(monkeypatch)
    trainer = Trainer(cfg, "dapo", policy=scripted_policy(cfg, {first[1], second[1]}))
    steps = record_steps(trainer)
    (row,) = trainer.run()
    assert calls == [first, second]  # one refill round, then enough
    assert row["refill_rounds"] == 1 and row["episodes"] == 8 and row["filtered"] == 4
    assert row["kept"] == 4 and row["skipped_iterations"] == 0
    (step,) = steps
    trained = sorted(sid.split("/")[0] for sid in step)
    assert trained == sorted([first[0]] * 2 + [second[0]] * 2)  # both rounds' groups


# ------------------------------------------------------------------ resume


def _comparable(rows: list[dict]) -> list[dict]:
    return [
        {k: v for k, v in r.items() if not k.startswith("time") and k != "tokens_per_s"}
        for r in rows
    ]


def test_interrupted_then_resumed_run_equals_an_uninterrupted_one(tmp_path: Path, monkeypatch):
    """4 iterations, one task each; the 2nd task's group is filtered out (a skipped iteration).
    Ctrl-C during the 3rd iteration's rollouts, then --resume: same tasks, same metric rows,
    same solve counts as a run that was never stopped."""
    tasks = order()
    kw = dict(iterations=4, filter="nonconstant_group", max_refill_rounds=0, on_exhausted="skip")
    cfg_a = toy_cfg(tmp_path, name="a", **kw)
    calls_a = record_rollouts(monkeypatch)
    rows_a = Trainer(cfg_a, "dapo", policy=scripted_policy(cfg_a, {tasks[1]})).run()
    assert calls_a == [[t] for t in tasks]
    assert [r["skipped_iterations"] for r in rows_a] == [0, 1, 1, 1]
    assert [r["optimizer_steps"] for r in rows_a] == [1, 0, 1, 1]

    cfg_b = toy_cfg(tmp_path, name="b", **kw)
    calls_b = record_rollouts(monkeypatch, interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg_b, "dapo", policy=scripted_policy(cfg_b, {tasks[1]})).run()
    assert len(read_metrics(cfg_b.run_dir)) == 2
    resumed = Trainer(
        toy_cfg(tmp_path, name="b", resume=True, **kw),
        "dapo",
        policy=scripted_policy(cfg_b, {tasks[1]}),
    )
    assert resumed.iteration == 2 and resumed.skipped_iterations == 1
    resumed.run()
    assert calls_b[:2] + calls_b[3:] == calls_a  # the interrupted iteration's tasks, redone
    rows_b = read_metrics(cfg_b.run_dir)
    assert [r["iteration"] for r in rows_b] == [1, 2, 3, 4]
    for b, a in zip(_comparable(rows_b), _comparable(rows_a), strict=True):
        assert b.keys() == a.keys()
        assert b == pytest.approx(a, rel=1e-5, nan_ok=True)
    solve_a, solve_b = (
        json.loads((Path(c.run_dir) / "solve_rates.json").read_text()) for c in (cfg_a, cfg_b)
    )
    assert solve_b == solve_a


# ------------------------------------------------------------------ config -> loss


def spy_loss(trainer: Trainer, seen: list[dict]) -> None:
    """Record the keyword arguments and value of every policy-loss call of the learner."""
    real = trainer.learner.loss_fn

    def spy(logprobs, old_logprobs, advantages, mask, **kwargs):
        loss, metrics = real(logprobs, old_logprobs, advantages, mask, **kwargs)
        seen.append({**kwargs, "fn": real, "value": float(loss.detach())})
        return loss, metrics

    trainer.learner.loss_fn = spy


def test_dapo_clip_range_reaches_the_loss(tmp_path: Path):
    """The stage presets' eps_high (0.3 / 0.26) differs from dapo_loss's default 0.28."""
    cfg = toy_cfg(tmp_path, eps_low=0.15, eps_high=0.26)
    trainer = Trainer(cfg, "dapo", policy=scripted_policy(cfg, set()))
    seen: list[dict] = []
    spy_loss(trainer, seen)
    trainer.run()
    assert seen, "the loss was never called"
    for call in seen:
        assert call["fn"] is objectives.dapo_loss
        assert (call.get("eps_low"), call.get("eps_high")) == (0.15, 0.26)
        assert call["agg_mode"] == "token-mean" and call["global_token_count"] > 0


def test_grpo_clip_and_kl_coef_reach_the_loss(tmp_path: Path, monkeypatch):
    """clip_eps reaches the clipped surrogate; kl_coef weighs the KL term: with the KL estimate
    fixed at 1.0, the step's loss is the policy loss + kl_coef."""

    def unit_kl(logprobs, ref_logprobs, mask, **kwargs):
        kl, metrics = real_kl(logprobs, ref_logprobs, mask, **kwargs)
        return kl * 0.0 + 1.0, metrics

    real_kl = objectives.kl_loss
    monkeypatch.setattr(objectives, "kl_loss", unit_kl)
    cfg = toy_cfg(
        tmp_path,
        GRPOConfig,
        clip_eps=0.1,
        kl_coef=0.07,
        agg_mode="seq-mean-token-sum",
        micro_batch_tokens=100_000,
    )
    trainer = Trainer(cfg, "grpo", policy=scripted_policy(cfg, set()))
    seen: list[dict] = []
    spy_loss(trainer, seen)
    (row,) = trainer.run()
    (call,) = seen  # one step, one micro-batch
    assert call["fn"] is objectives.POLICY_LOSSES["grpo"]
    assert (call.get("eps_low"), call.get("eps_high")) == (0.1, 0.1)
    assert call["agg_mode"] == "seq-mean-token-sum"
    assert trainer.learner.ref_model is not None
    assert row["loss"] == pytest.approx(call["value"] + 0.07, abs=1e-6)


@pytest.mark.parametrize(
    "cls, kw, want, loss",
    [
        (DAPOConfig, {"loss": "gspo"}, (3e-4, 4e-4), "gspo"),
        (GRPOConfig, {"loss": "gspo"}, (3e-4, 4e-4), "gspo"),
        (GRPOConfig, {"eps_low": 0.1, "eps_high": 0.25}, (0.1, 0.25), "grpo"),
    ],
)
def test_gspos_own_clip_and_grpos_asymmetric_clip_reach_the_loss(
    tmp_path: Path, cls, kw, want, loss
):
    """GSPO gets its paper's range, not the algorithm's 0.2/0.3 or clip_eps; GRPO sets each side."""
    cfg = toy_cfg(tmp_path, cls, **kw)
    trainer = Trainer(
        cfg, "grpo" if cls is GRPOConfig else "dapo", policy=scripted_policy(cfg, set())
    )
    seen: list[dict] = []
    spy_loss(trainer, seen)
    trainer.run()
    assert seen, "the loss was never called"
    for call in seen:
        assert call["fn"] is objectives.POLICY_LOSSES[loss]
        assert (call.get("eps_low"), call.get("eps_high")) == want
