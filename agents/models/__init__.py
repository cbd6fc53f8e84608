"""Model backends and ``load_model(spec)``. Heavy backends are imported only when asked for.

Spec forms::

    oracle                      OracleModel: replays swe_gym.oracle for each task
    scripted:<file>             ScriptedModel.from_file(file) (JSON list / {task_id: list} / JSONL)
    hf:<path or .gguf file>     TransformersModel(path)
    vllm:<path>                 VLLMModel(path)
    openai:<base_url>#<model>   OpenAIModel(base_url=..., model=...)
    smollm2                     TransformersModel on the bundled SmolLM2-135M-Instruct
    vllm:smollm2                VLLMModel on the bundled SmolLM2-135M-Instruct

Keyword arguments are passed to the backend's constructor.
"""

from __future__ import annotations

from typing import Any

from agents.models.scripted import OracleModel, ScriptedModel, ScriptExhausted

SPEC_FORMS = (
    "oracle",
    "scripted:<file>",
    "hf:<path or .gguf file>",
    "vllm:<path>",
    "openai:<base_url>#<model>",
    "smollm2",
    "vllm:smollm2",
)

__all__ = ["SPEC_FORMS", "OracleModel", "ScriptExhausted", "ScriptedModel", "load_model"]


def _smollm2_path() -> str:
    from agents.models.smollm2 import smollm2_path

    return str(smollm2_path())


def load_model(spec: str, **kw: Any) -> Any:
    """Build a model from a spec string (see the module docstring for the accepted forms)."""
    kind, sep, rest = spec.partition(":")
    if spec == "oracle":
        return OracleModel(**kw)
    if spec == "smollm2":
        from agents.models.transformers import TransformersModel

        return TransformersModel(_smollm2_path(), **kw)
    if sep and rest:
        if kind == "scripted":
            return ScriptedModel.from_file(rest, **kw)
        if kind == "hf":
            from agents.models.transformers import TransformersModel

            return TransformersModel(rest, **kw)
        if kind == "vllm":
            from agents.models.vllm import VLLMModel

            return VLLMModel(_smollm2_path() if rest == "smollm2" else rest, **kw)
        if kind == "openai":
            base_url, hash_, model = rest.rpartition("#")
            if not hash_ or not base_url or not model:
                raise ValueError(
                    f"openai model spec {spec!r} must be 'openai:<base_url>#<model>', e.g. "
                    "'openai:http://localhost:8000/v1#my-model'"
                )
            from agents.models.openai import OpenAIModel

            return OpenAIModel(base_url=base_url, model=model, **kw)
    raise ValueError(f"unknown model spec {spec!r}; accepted forms: {', '.join(SPEC_FORMS)}")
