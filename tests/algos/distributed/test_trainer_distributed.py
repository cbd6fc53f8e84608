"""The training entry point under torchrun: ``torchrun --nproc-per-node 2 -m algos.dapo`` (gloo,
CPU) shards the policy with FSDP2, matches a single-process run step for step, writes a sharded
checkpoint that one process resumes; ``rollout_backend=ray`` runs the episodes on Ray workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from algos import dapo
from algos.config import ConfigError
from algos.dapo import DAPOConfig
from algos.loop.metrics import read_metrics
from tests.algos.toy_run import toy_argv, toy_cfg

# The tiny toy run of tests/algos/test_dapo.py, made reproducible across processes: one episode
# at a time (seeded sampling), one optimiser step per iteration, the sampler's old log-probs (so
# ratio_mean == 1 shows that rank 0's engine received the updated weights).
TOY = toy_argv(concurrency=1, max_steps_per_iteration=1, old_logprobs="behaviour")


@pytest.mark.slow  # three runs of the CLI, two of them torchrun x2
def test_torchrun_matches_one_process_and_resumes_with_one(tmp_path: Path, torchrun_fn):
    one, two = tmp_path / "one", tmp_path / "two"
    torchrun_fn(["-m", "algos.dapo", *TOY, "--iterations", "2", "--run-dir", str(two)], nproc=2)
    assert dapo.main([*TOY, "--iterations", "2", "--run-dir", str(one)]) == 0
    rows1, rows2 = read_metrics(one), read_metrics(two)
    assert [r["iteration"] for r in rows2] == [1, 2]  # rank 0 alone logs
    for a, b in zip(rows1, rows2, strict=True):
        for k in ("episodes", "reward_mean", "kept", "optimizer_steps"):
            assert b[k] == a[k], k
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert b["entropy"] == pytest.approx(a["entropy"], rel=1e-4)
        assert b["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # engine got the new weights
    ckpt = two / "checkpoint"
    assert (ckpt / ".metadata").exists() and (ckpt / "learner_extra.pt").exists()  # sharded
    assert (two / "solve_rates.json").exists() and (two / "config.yaml").exists()

    # one process resumes the 2-process run (DCP reshards weights and optimizer state)
    assert dapo.main(["--resume", str(two), "--iterations", "3"]) == 0
    rows = read_metrics(two)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[2]["step"] == 3 and rows[2]["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert (ckpt / "learner_state.pt").exists()  # now a single-process checkpoint


def test_cp_must_divide_the_world_size(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match=r"cp=3 does not divide the world size 4"):
        DAPOConfig(cp=3)
    with pytest.raises(ConfigError, match="cp must be >= 1"):
        DAPOConfig(cp=0)


def test_unknown_rollout_backend_is_named():
    with pytest.raises(ValueError, match="unknown rollout_backend 'rey'.*Did you mean 'ray'"):
        DAPOConfig(rollout_backend="rey")


@pytest.mark.slow  # a Ray cluster, its worker and two DAPO iterations (56 s wall under load)
def test_ray_rollout_backend_trains_and_pushes_weights(tmp_path: Path):
    ray = pytest.importorskip("ray")
    from algos.loop.trainer import Trainer
    from algos.policy import RayRollouts

    ray.init(
        num_cpus=3,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    try:
        cfg = toy_cfg(
            tmp_path,
            group_size=4,
            problems_per_iteration=2,
            batch_size=2,
            lr=1e-3,
            concurrency=2,
            iterations=2,
            max_steps_per_iteration=1,
            old_logprobs="behaviour",
            rollout_backend="ray",
            ray_workers=1,
        )
        trainer = Trainer(cfg, "dapo")
        try:
            assert isinstance(trainer.policy.engine, RayRollouts)
            rows = trainer.run()
            engine = trainer.policy.engine.engines[0]
            assert ray.get(engine.version.remote()) == 2  # one push per iteration
        finally:
            trainer.close()
    finally:
        ray.shutdown()
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:
        assert r["episodes"] >= 8 and r["kept"] >= 2 and r["optimizer_steps"] == 1
        assert r["rollout_errors"] == 0 and r["not_token_exact"] == 0
        # the engine's log-probs equal the learner's: the engine holds the pushed weights
        assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
