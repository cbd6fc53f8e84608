"""Devices are decided where tensors are used, not when objects are built.

CI has no GPU, so the move a learner makes (CPU -> CUDA) is made observable on CPU: the module is
moved to the ``meta`` device after the sampler was built, and the test records the device of
every tensor the sampler hands to the module and of every random generator it makes. A sampler
that remembered its build-time device would feed CPU tensors to a ``meta`` module, which is
exactly the "index is on cpu, different from other tensors on cuda:0" failure on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import agents.models.transformers as transformers_backend
from agents.protocols import Conversation, SamplingParams
from algos.dapo import DAPOConfig
from algos.distributed import learner as dist_learner
from algos.distributed.fsdp import DistContext
from algos.trainer import Trainer

META = torch.device("meta")


class _Reached(Exception):
    """Raised by the spy once the module is called: what was recorded is what matters."""


def spy_generation(monkeypatch: pytest.MonkeyPatch, module: torch.nn.Module) -> dict[str, list]:
    """Record the devices of generators made and of tensors passed to ``module``'s forward."""
    seen: dict[str, list] = {"generators": [], "inputs": []}

    def make_generator(device, seed):
        seen["generators"].append(torch.device(device))
        return torch.Generator().manual_seed(seed)  # meta has no generator; never sampled from

    def pre_hook(_module, args, kwargs):
        tensors = [*args, *kwargs.values()]
        seen["inputs"] += [t.device for t in tensors if isinstance(t, torch.Tensor)]
        raise _Reached

    monkeypatch.setattr(transformers_backend, "make_generator", make_generator)
    module.register_forward_pre_hook(pre_hook, with_kwargs=True)
    return seen


def generate_once(sampler) -> None:
    prompt = Conversation(token_ids=sampler.tokenizer.encode("hello there"))
    with pytest.raises(_Reached):
        sampler.generate(prompt, SamplingParams(max_new_tokens=2, seed=3))


def toy_cfg(tmp_path: Path, **kw) -> DAPOConfig:
    base = dict(run_dir=str(tmp_path / "run"), env="ToyKeyword-v0", env_kwargs={"target": "e"},
                policy="tiny-random", max_new_tokens=3, max_turns=1, max_context_tokens=128,
                group_size=2, problems_per_iteration=2, batch_size=2, length_penalty=False,
                iterations=1, progress=False, concurrency=2)
    base.update(kw)
    return DAPOConfig(**base)


def test_sampler_follows_its_module_when_moved_after_it_was_built(tmp_path: Path, monkeypatch):
    from agents.models.smollm2 import tiny_random_model

    sampler = transformers_backend.TransformersModel(tiny_random_model(tmp_path / "m"), seed=0)
    try:
        assert sampler.device == torch.device("cpu")
        sampler.model.to(META)  # what make_learner does with CUDA, after the sampler exists
        assert sampler.device == META
        seen = spy_generation(monkeypatch, sampler.model)
        generate_once(sampler)
        assert seen["generators"] == [META]
        assert seen["inputs"] and set(seen["inputs"]) == {META}
    finally:
        sampler.close()


def test_trainer_sampler_and_reference_follow_the_learners_device(tmp_path: Path, monkeypatch):
    # The entry points build the policy (and its sampler) first, then the learner, which moves
    # the module to its device: make that device `meta` and check everything followed it.
    monkeypatch.setattr(dist_learner, "setup_distributed",
                        lambda cp=1: DistContext(device=META))
    with pytest.warns(UserWarning, match="kl_coef"):
        cfg = toy_cfg(tmp_path, kl_coef=0.1)
    trainer = Trainer(cfg, "dapo")
    try:
        assert trainer.policy.shares_weights
        assert {p.device for p in trainer.learner.model.parameters()} == {META}
        assert {p.device for p in trainer.learner.ref_model.parameters()} == {META}
        assert trainer.policy.sampler.device == META
        seen = spy_generation(monkeypatch, trainer.policy.model)
        generate_once(trainer.policy.sampler)
        assert seen["generators"] == [META]
        assert set(seen["inputs"]) == {META}
    finally:
        trainer.close()


def test_engine_copy_follows_the_training_device(tmp_path: Path, monkeypatch):
    # engine_dtype bfloat16: the engine holds its own copy, put on the training device.
    import algos.trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "training_device", lambda: META)
    policy = trainer_mod.build_policy(toy_cfg(tmp_path, engine_dtype="bfloat16"),
                                      tmp_path / "run")
    try:
        assert not policy.shares_weights
        engine = policy.sampler.model
        assert {(p.device, p.dtype) for p in engine.parameters()} == {(META, torch.bfloat16)}
        seen = spy_generation(monkeypatch, engine)
        generate_once(policy.sampler)
        assert seen["generators"] == [META] and set(seen["inputs"]) == {META}
    finally:
        policy.close()
