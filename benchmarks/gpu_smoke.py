"""GPU smoke test a user runs on a fresh GPU machine: does training work end to end on CUDA?

Parts, each in its own subprocess under its own timeout (one failing or hanging part does not
hide the others); one JSON line per part on stdout and in ``--out``:

1. ``env``: torch / CUDA / transformers versions, the GPU, whether vLLM and Liger are installed.
2. ``dapo``: ``python -m algos.dapo`` on ToyKeyword-v0 with the arguments of
   ``benchmarks/bench_learning.py`` (a tiny random policy learns to say "w") on the GPU, with the
   transformers engine (``--engine vllm`` to use vLLM): exit status, rollout errors, reward of
   the first iteration (the untrained policy) and of the last three, whether it rose.
3. ``learner_64k``: one Learner step on Qwen2.5-1.5B shapes (random weights) at 65,536 tokens:
   seconds per step, tokens/s, peak GiB, MFU (``benchmarks/bench_gpu_learner.py``).
4. ``weight_push``: the rollout engine's weight push (``Policy.push_weights``: the training
   model's float32 weights, cast to bf16, into the engine) on a ~0.9B-parameter random Llama:
   median seconds and GB/s; then the engine must still generate.

Nothing is installed or downloaded: the models are built from their numbers, the tokenizer is
the one bundled for tests. ``--dry`` runs every part with tiny settings on whatever device there
is (CPU included): it checks the script, not the GPU. Exit status 1 when a part fails.

    python benchmarks/gpu_smoke.py                  # about 5-10 min on one GPU
    python benchmarks/gpu_smoke.py --dry            # a few minutes on CPU
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
PARTS = ("env", "dapo", "learner_64k", "weight_push")


def part_env(args) -> dict:
    import importlib.util

    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "transformers": transformers.__version__,
        "vllm": importlib.util.find_spec("vllm") is not None,
        "liger_kernel": importlib.util.find_spec("liger_kernel") is not None,
        "ok": cuda or args.dry,
    }


def part_dapo(args) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    from bench_learning import COMMON

    from algos import dapo
    from algos.loop.metrics import read_metrics

    iterations = 2 if args.dry else 16
    run = Path(tempfile.mkdtemp(prefix="gpu-smoke-dapo-")) / "run"
    t0 = time.perf_counter()
    try:
        status = dapo.main(
            [
                *COMMON,
                "--iterations",
                str(iterations),
                "--seed",
                "0",
                "--engine",
                args.engine,
                "--run-dir",
                str(run),
            ]
        )
    except SystemExit as e:  # the entry point's loud failure: its message is the result
        return {"ok": False, "exit_status": 1, "error": str(e.code)[-1500:]}
    rows = read_metrics(run)
    rewards = [r["reward_mean"] for r in rows]
    start, end = rewards[0], statistics.fmean(rewards[-3:])
    out = {
        "exit_status": status,
        "iterations": len(rows),
        "wall_s": time.perf_counter() - t0,
        "engine": args.engine,
        "rollout_errors": sum(r["rollout_errors"] for r in rows),
        "reward_errors": sum(r["reward_errors"] for r in rows),
        "reward": rewards,
        "reward_start": start,
        "reward_end": end,
        "reward_rose": end > start + 0.3,
        "cuda_peak_gib": (
            torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        ),
    }
    # the learner and the rollouts really ran on the GPU: CUDA memory was used
    on_gpu = bool(out["cuda_peak_gib"]) or args.dry
    out["ok"] = (
        status == 0 and out["rollout_errors"] == 0 and on_gpu and (out["reward_rose"] or args.dry)
    )
    return out


def part_learner(args) -> dict:
    sys.path.insert(0, str(HERE))
    import torch
    from bench_gpu_learner import model_flops_per_token, run_row

    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape, length = ("tiny", 512) if args.dry else ("1.5b", 65536)
    row = run_row("ours", shape, length, device, steps=2, profile=False)
    flops = model_flops_per_token(shape, length) * length
    row["mfu"] = flops / row["s_per_step"] / (args.peak_tflops * 1e12) if device == "cuda" else None
    row["ok"] = True
    return row


def part_push(args) -> dict:
    import torch

    from agents.models.smollm2 import tiny_random_model
    from agents.protocols import Conversation, SamplingParams
    from algos.distributed.fsdp import training_device
    from algos.policy import Policy, load_policy_model

    root = Path(tempfile.mkdtemp(prefix="gpu-smoke-push-"))
    hidden, layers = (64, 2) if args.dry else (1536, 28)
    path = tiny_random_model(root / "model", hidden_size=hidden, num_layers=layers)
    model, tok, path = load_policy_model(str(path), root)
    model.to(training_device())
    engine_name = args.engine
    if engine_name == "vllm":
        from agents.models.vllm import VLLMModel

        engine = VLLMModel(
            str(path), dtype="bfloat16", max_model_len=512, gpu_memory_utilization=0.3
        )
    else:
        from agents.models.transformers import TransformersModel

        engine = TransformersModel(copy.deepcopy(model).to(torch.bfloat16), tokenizer=tok)
    policy = Policy(model, tok, path, engine=engine, engine_dtype=torch.bfloat16)
    try:
        times = []
        for _ in range(3):
            with torch.no_grad():
                for p in model.parameters():  # a "training step": new weights to push
                    p.mul_(1.0001)
            times.append(policy.push_weights())
        params = sum(p.numel() for p in model.parameters())
        prompt = Conversation(token_ids=tok.encode("hello"))
        gen = engine.generate(prompt, SamplingParams(max_new_tokens=4, seed=0))
        s = statistics.median(times)
        return {
            "engine": engine_name,
            "params": params,
            "push_s": times,
            "push_median_s": s,
            "gb_per_s": params * 2 / s / 1e9,
            "generated_tokens": len(gen.token_ids),
            "ok": len(gen.token_ids) > 0,
        }
    finally:
        policy.close()


RUNNERS = {
    "env": part_env,
    "dapo": part_dapo,
    "learner_64k": part_learner,
    "weight_push": part_push,
}


def run_part(name: str, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--part",
        name,
        "--engine",
        args.engine,
        "--peak-tflops",
        str(args.peak_tflops),
    ] + (["--dry"] if args.dry else [])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"part": name, "ok": False, "error": f"timeout after {args.timeout} s"}
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if line:
        row = json.loads(line[-1][len("RESULT ") :])
    else:
        row = {"ok": False, "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    return {"part": name, "time_s": time.perf_counter() - t0, **row}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument(
        "--engine",
        default=None,
        choices=("transformers", "vllm"),
        help="rollout engine (default transformers; weight_push: vllm when installed)",
    )
    ap.add_argument(
        "--dry",
        action="store_true",
        help="tiny settings, any device: checks the script, not the GPU",
    )
    ap.add_argument("--timeout", type=int, default=900, help="seconds per part")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_smoke.jsonl")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        if args.engine is None:
            args.engine = "transformers"
        try:
            row = RUNNERS[args.part](args)
        except Exception as e:  # noqa: BLE001 - the part's failure is its result
            row = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:1500]}"}
        print("RESULT " + json.dumps(row), flush=True)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    failed = []
    with args.out.open("w") as f:
        for name in args.parts:
            part_args = argparse.Namespace(**vars(args))
            if part_args.engine is None:
                part_args.engine = "transformers"
                if name == "weight_push" and not args.dry:
                    import importlib.util

                    if importlib.util.find_spec("vllm") is not None:
                        part_args.engine = "vllm"
            row = run_part(name, part_args)
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
            if not row.get("ok"):
                failed.append(name)
    print(
        f"{'FAILED: ' + ', '.join(failed) if failed else 'all parts passed'}; wrote {args.out}",
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
