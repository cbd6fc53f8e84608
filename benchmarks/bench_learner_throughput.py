"""The RFT/DAPO learner's tokens/s on SmolLM2-135M against a plain PyTorch loop, same batch.

Plain: ``model(input_ids, attention_mask, labels)``, ``loss.backward()``, ``AdamW.step()`` on
the batch padded into one tensor (loss on the policy tokens only, as RFT's). Ours:
``Learner.train_step`` with the SFT loss (RFT's learner; DAPO's differs only in the loss) and
the learner's defaults (packing, shared-prefix tree packing where samples share a prompt).
Both start from the same weights, with the same torch thread count, and alternate step by step
so machine load hits them alike; tokens/s counts the batch's real tokens, the median over
steps. The batch: the oracle's trajectories of a task file (``--trajectories``, e.g. the
learning benchmark's ``oracle-runs/trajectories.jsonl``), or a synthetic batch with one shared
prompt. ``--vllm`` also starts the in-process vLLM engine (as DAPO does) and reports torch's
thread count before and after it, and the learner's tokens/s beside it.

    python benchmarks/bench_learner_throughput.py [--trajectories FILE] [--steps 3] [--vllm]

Writes benchmarks/results/learner_throughput.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).resolve().parent / "results"


def batch_from(path: str | None, n: int, tokenizer) -> list:
    from algos.learner.samples import Sample

    if path:
        from agents.trajectory import Trajectory
        from algos.loop.rft_loop import build_samples
        from algos.rft import RFTConfig
        from algos.rollout.scoring import Counters

        trajs = [t for t in Trajectory.load_jsonl(path) if t.resolved][:n]
        return build_samples(RFTConfig(policy="smollm2"), trajs, Counters())
    prompt = tokenizer("You fix an issue in a code repository. " * 12)["input_ids"]
    out = []
    for i in range(n):
        reply = tokenizer(f"Next step {i}.\n```\nsubmit\n```" * 4)["input_ids"]
        out.append(Sample(prompt + reply, [0] * len(prompt) + [1] * len(reply), sample_id=i))
    return out


def plain_step(model, opt, samples) -> None:
    width = max(len(s.input_ids) for s in samples)
    pad = 0
    ids = torch.tensor([s.input_ids + [pad] * (width - len(s.input_ids)) for s in samples])
    att = torch.tensor([[1] * len(s.input_ids) + [0] * (width - len(s.input_ids)) for s in samples])
    labels = torch.tensor(
        [
            [t if m else -100 for t, m in zip(s.input_ids, s.loss_mask, strict=True)]
            + [-100] * (width - len(s.input_ids))
            for s in samples
        ]
    )
    loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", default=None)
    p.add_argument("--batch", type=int, default=4, help="trajectories per step")
    p.add_argument("--steps", type=int, default=3, help="measured steps per side")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: as is)")
    p.add_argument("--vllm", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS / "learner_throughput.json")
    args = p.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.models.smollm2 import smollm2_path
    from algos.learner.learner import Learner
    from algos.learner.learner_config import LearnerConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = str(smollm2_path())
    tok = AutoTokenizer.from_pretrained(folder)
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    samples = batch_from(args.trajectories, args.batch, tok)
    tokens = sum(len(s.input_ids) for s in samples)
    result: dict = {
        "threads_before": torch.get_num_threads(),
        "batch": len(samples),
        "tokens_per_step": tokens,
    }
    engine = None
    if args.vllm:
        from agents.models import load_model

        engine = load_model(f"vllm:{folder}")
        result["threads_after_vllm"] = torch.get_num_threads()
    plain_model = copy.deepcopy(base).train()
    opt = torch.optim.AdamW(plain_model.parameters(), lr=1e-5, weight_decay=0.1)
    learner = Learner(
        copy.deepcopy(base).train(),
        LearnerConfig(
            lr=1e-5, weight_decay=0.1, loss="sft", agg_mode="token-mean", micro_batch_tokens=8192
        ),
    )
    times: dict[str, list[float]] = {"plain": [], "learner": []}
    for step in range(args.steps + 1):  # step 0 warms both up, unmeasured
        for name in ("plain", "learner"):
            t0 = time.perf_counter()
            if name == "plain":
                plain_step(plain_model, opt, samples)
            else:
                learner.train_step(samples)
            dt = time.perf_counter() - t0
            print(
                f"step {step} {name}: {dt:.1f} s ({tokens / dt:.0f} tokens/s)"
                f"{'' if step else ' (warm-up)'}",
                flush=True,
            )
            if step:
                times[name].append(dt)
    for name, ts in times.items():
        result[f"{name}_tokens_per_s"] = tokens / statistics.median(ts)
        result[f"{name}_step_s"] = ts
    result["learner_vs_plain"] = result["learner_tokens_per_s"] / result["plain_tokens_per_s"]
    result["threads_during"] = torch.get_num_threads()
    if engine is not None:
        engine.close() if hasattr(engine, "close") else None
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_step_s")}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
