"""The real Learner under make_learner: one process, torchrun x2 (dp) or x2 (cp). Writes
rank 0's metrics and full parameters after two DAPO steps to argv[1]. Driven by test_fsdp.py."""

from __future__ import annotations

import sys

import torch

from algos.distributed.fsdp import full_state_dict, teardown_distributed
from algos.distributed.learner import make_learner
from algos.learner.learner_config import LearnerConfig
from algos.learner.samples import Sample
from tests.algos.tiny_models import tiny_llama


def samples(step: int) -> list[Sample]:
    g = torch.Generator().manual_seed(step)
    out = []
    for i, n in enumerate((9, 14, 5, 11)):
        ids = torch.randint(0, 97, (n,), generator=g).tolist()
        mask = [0] + (torch.rand(n - 1, generator=g) > 0.3).long().tolist()
        old = [(-1.0 - 0.1 * j) * m for j, m in enumerate(mask)]
        out.append(Sample(ids, mask, behaviour_logprobs=old, advantage=1.0 - 0.5 * i, sample_id=i))
    return out


def main() -> None:
    torch.set_num_threads(1)
    model = tiny_llama(seed=1, attn=None, vocab=97, max_positions=128)
    # lr 1e-3: AdamW turns reduction-order noise on near-zero gradients into updates of order
    # lr; any exact attention in fp32 sits ~2e-6 from a float64 run after two steps here (at
    # 1e-2 that floor reaches the test's 1e-5 tolerance).
    learner = make_learner(
        model,
        LearnerConfig(lr=1e-3, micro_batch_tokens=24, loss="dapo"),
        cp=int(sys.argv[2]) if len(sys.argv) > 2 else 1,
    )
    logs = [learner.train_step(samples(0))]
    # the first step's clipped gradients (same weights on every launch): the equivalence check;
    # the weights after AdamW amplify reduction-order noise near its eps (issue 16)
    grads = {
        k: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
        for k, p in learner.model.named_parameters()
    }
    logs.append(learner.train_step(samples(1)))
    if len(sys.argv) > 3:  # round trip through the learner's own checkpoint methods
        learner.save_checkpoint(sys.argv[3], extra_state={"iteration": 2})
        assert learner.load_checkpoint(sys.argv[3]) == {"iteration": 2}
        assert learner.step == 2
    params = (
        full_state_dict(learner.model)
        if hasattr(learner, "ctx")
        else {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    )
    rank = getattr(getattr(learner, "ctx", None), "rank", 0)
    if rank == 0:
        torch.save({"logs": logs, "params": params, "grads": grads}, sys.argv[1])
    teardown_distributed()


if __name__ == "__main__":
    main()
