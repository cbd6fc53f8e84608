"""FSDP2 learner hooks: 1 process == 2 torchrun ranks == a 2x2 (dp, cp) mesh; DCP reshards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from algos.distributed.fsdp import (
    DistContext,
    all_reduce_token_count,
    call_model,
    export_hf,
    setup_distributed,
    shard_model,
)

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
TOL = 1e-5  # fp32 loss and gradient norm: reduction-order noise is ~1e-7 relative
# fsdp_worker's SGD moves a weight by lr * (gradient), so two steps at lr 1e-2 turn ~1e-7
# gradient noise into ~1e-9; 1e-6 is a wide margin that a real difference still exceeds
PARAM_TOL = 1e-6
GRAD_RTOL = 1e-4  # of each gradient tensor's norm (see tests/algos/learner/test_learner.py)
WORKER = str(HERE / "fsdp_worker.py")


def _python(args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-5000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, torchrun_fn):
    """Every launch once: plain python, torchrun x2, torchrun x4 (dp=2, cp=2), resumes.

    ck1 (saved by one process) is not resumed here; the 2 -> 1 and 2 -> 2 reloads cover DCP
    resharding both ways.
    """
    d = tmp_path_factory.mktemp("fsdp")
    _python([WORKER, str(d / "w1.pt"), "--ckpt", str(d / "ck1"), "--save-at", "1"])
    torchrun_fn([WORKER, str(d / "w2.pt"), "--ckpt", str(d / "ck2"), "--save-at", "1"], 2)
    torchrun_fn([WORKER, str(d / "w4.pt"), "--cp", "2"], 4)
    _python([WORKER, str(d / "r1from2.pt"), "--resume", str(d / "ck2")])
    torchrun_fn([WORKER, str(d / "r2from2.pt"), "--resume", str(d / "ck2")], 2)
    out = {p.stem: torch.load(p) for p in d.glob("*.pt")}
    out["dir"] = d
    return out


def _max_param_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_world_size_one_runs_without_process_group():
    env = os.environ.pop("WORLD_SIZE", None)
    try:
        ctx = setup_distributed(device="cpu")
    finally:
        if env is not None:
            os.environ["WORLD_SIZE"] = env
    assert (ctx.world, ctx.dp, ctx.cp, ctx.distributed) == (1, 1, 1, False)
    assert not torch.distributed.is_initialized()
    model = torch.nn.Linear(2, 2)
    assert shard_model(model, ctx) is model
    assert all_reduce_token_count(torch.tensor(7), ctx) == 7
    assert call_model(model, lambda m, x: m(x).shape, torch.zeros(1, 2)) == (1, 2)
    assert ctx.split_for_dp([1, 2, 3]) == [1, 2, 3]
    assert DistContext(dp=2, dp_rank=1).split_for_dp([0, 1, 2, 3, 4]) == [1, 3]


def test_cp_must_divide_world():
    with pytest.raises(ValueError, match="cp=3 must be >= 1 and divide the world size 1"):
        setup_distributed(cp=3, device="cpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        setup_distributed(device="tpu")


# The tests on ``runs`` share its launches (python, torchrun x2 and x4, two resumes: about a
# minute on 2 cores) and the real learner's three: slow, outside the fast lane.
@pytest.mark.slow
def test_two_ranks_and_dp_cp_mesh_match_one_process(runs):
    one = runs["w1"]
    for name, mesh in (("w2", (2, 1)), ("w4", (2, 2))):
        other = runs[name]
        assert (other["dp"], other["cp"]) == mesh
        for a, b in zip(one["log"], other["log"], strict=True):
            assert a["tokens"] == b["tokens"]  # global loss-token count, all-reduced
            assert abs(a["loss"] - b["loss"]) < TOL, (name, a, b)
            assert abs(a["norm"] - b["norm"]) < TOL, (name, a, b)  # gradient (global norm)
        assert _max_param_diff(one["params"], other["params"]) < PARAM_TOL, name  # 2 SGD steps


@pytest.mark.slow
@pytest.mark.parametrize("resumed", ["r1from2", "r2from2"])
def test_sharded_checkpoint_resumes_across_world_sizes(runs, resumed):
    """Saved after step 1 with N processes, loaded with M: step 2 equals the uninterrupted run."""
    full = runs["w1"]
    res = runs[resumed]
    assert len(res["log"]) == 1
    assert abs(res["log"][0]["loss"] - full["log"][1]["loss"]) < TOL
    assert _max_param_diff(full["params"], res["params"]) < PARAM_TOL  # incl. momentum


@pytest.mark.slow
def test_export_hf_writes_one_loadable_folder(runs):
    from transformers import AutoModelForCausalLM

    out = export_hf(runs["dir"] / "ck2", runs["dir"] / "hf")
    model = AutoModelForCausalLM.from_pretrained(out)
    sd = model.state_dict()
    saved = runs["w2"]["params_at_save"]
    for k, v in saved.items():
        assert torch.equal(sd[k], v), k


def test_export_hf_refuses_a_non_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="hf_config"):
        export_hf(tmp_path, tmp_path / "out")


@pytest.mark.slow
def test_real_learner_under_torchrun_dp2_and_cp2_matches_one_process(tmp_path, torchrun_fn):
    """algos.learner.learner.Learner via make_learner: DAPO loss, packing, uneven micro-batch counts."""
    worker = str(HERE / "learner_worker.py")
    _python([worker, str(tmp_path / "one.pt")])
    torchrun_fn([worker, str(tmp_path / "dp2.pt"), "1", str(tmp_path / "ckpt")], 2)
    torchrun_fn([worker, str(tmp_path / "cp2.pt"), "2"], 2)
    one = torch.load(tmp_path / "one.pt")
    for name in ("dp2", "cp2"):
        other = torch.load(tmp_path / f"{name}.pt")
        for a, b in zip(one["logs"], other["logs"], strict=True):
            assert a["loss_tokens"] == b["loss_tokens"]
            assert abs(a["grad_norm"] - b["grad_norm"]) < TOL, (name, a, b)
        assert one["grads"].keys() == other["grads"].keys()
        for k, g in one["grads"].items():  # the first step (same weights everywhere)
            rel = (g - other["grads"][k]).norm() / g.norm().clamp_min(1e-30)
            assert rel < GRAD_RTOL, (name, k, float(rel))
        # the weights after two AdamW steps: as loose as its eps amplification needs (~2e-6)
        assert _max_param_diff(one["params"], other["params"]) < TOL, name
    # DistributedLearner.save_checkpoint wrote a sharded checkpoint that exports to HF
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(export_hf(tmp_path / "ckpt", tmp_path / "hf"))
    dp2 = torch.load(tmp_path / "dp2.pt")["params"]
    assert all(torch.equal(hf.state_dict()[k], v) for k, v in dp2.items())
