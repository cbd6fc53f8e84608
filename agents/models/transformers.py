"""``TransformersModel``: a token-in/token-out backend on plain Hugging Face transformers.

It samples from ``conversation.token_ids`` exactly (never re-tokenising) with a hand-written
decode loop, so the ids and log-probs it returns are the ones actually sampled.

Log-prob semantics (shared with ``VLLMModel``, which uses vLLM's ``processed_logprobs``): the
log-prob of each sampled token under the distribution it was sampled from, i.e. the log-softmax
of the logits after temperature scaling AND after top-k/top-p truncation (renormalised over the
kept tokens). With top-k/top-p off (the RL default, docs/methods.md#react-scaffold) this is
``log_softmax(logits / T)``, exactly what a learner computes for the policy at temperature T.
Greedy decoding (temperature 0) reports ``log_softmax(logits)`` (temperature 1, no truncation).

Concurrency: agent threads may call :meth:`TransformersModel.generate` at once; a
:class:`RequestBatcher` gathers the calls that arrive within a few milliseconds into one
left-padded batch (:meth:`TransformersModel.generate_batch`). Each request has its own random
generator, so with ``SamplingParams.seed`` set its sample does not depend on what it was batched
with (up to floating-point differences of padded batches).

In-flight weight updates: :meth:`TransformersModel.update_weights` runs on the batching thread
between two batches, so a batch already running finishes on the old weights, requests submitted
after the update use the new ones, and no generation ever mixes the two. Each ``Generation``
reports the ``policy_version`` of the weights that sampled it. (``generate_batch`` runs on the
caller's thread and bypasses this ordering: do not call it while another thread updates.)
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from agents.protocols import Conversation, Generation, SamplingParams
from swe_gym.errors import unknown_choice

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

Request = tuple[Conversation, SamplingParams]


def check_prompt(conversation: Conversation) -> list[int]:
    """The prompt ids of a conversation, or a clear error if a token backend cannot use it."""
    ids = conversation.token_ids
    if not ids:
        raise ValueError(
            "conversation.token_ids is empty; token backends generate from the exact prompt ids "
            "(render the messages with agents.chat first)"
        )
    return list(ids)


def eos_ids(tokenizer: Any, generation_config: Any = None) -> set[int]:
    """End-of-turn ids: the generation config's ``eos_token_id`` (int or list) and the
    tokenizer's ``eos_token_id``."""
    found: set[int] = set()
    for source in (getattr(generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            found.add(source)
        elif source is not None:
            found.update(int(i) for i in source)
    return found


def decode_text(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """Text of sampled ids: special tokens dropped (like vLLM and its server); bytes that are not
    valid UTF-8 (a split multi-byte character) become U+FFFD instead of raising."""
    text = tokenizer.decode(list(token_ids), skip_special_tokens=True)
    # Byte-level BPE decoders already substitute U+FFFD; this guards others (lone surrogates).
    return text.encode("utf-8", errors="replace").decode("utf-8")


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p truncation of one row of (temperature-scaled) logits, as vLLM does it:
    top-p keeps the smallest set whose probability reaches ``top_p`` (always at least one)."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - top_p
        drop[-1] = False
        logits = logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
    return logits


class RequestBatcher:
    """Collects concurrent requests for ``window_s`` and hands them to ``run_batch`` together.

    ``submit`` returns a future; one background thread (started lazily, daemon) runs the
    batches, so the backend is only ever called from one thread. ``call(fn)`` runs ``fn`` on that
    thread between batches: requests submitted before it are batched without it, those after it
    run after it (a weight update cannot land inside a batch).
    """

    def __init__(
        self,
        run_batch: Callable[[list[Request]], list[Generation]],
        window_s: float = 0.01,
        max_batch_size: int = 64,
        name: str = "batcher",
    ):
        self._run_batch = run_batch
        self.window_s = window_s
        self.max_batch_size = max_batch_size
        # (request, future) for a generation, (fn, future) for a call, None to stop
        self._queue: queue.Queue[tuple[Any, Future] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._name = name
        self.batch_sizes: list[int] = []  # one entry per backend call, for tests and stats

    def submit(self, conversation: Conversation, params: SamplingParams) -> Future:
        return self._put((conversation, params))

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the batching thread between two batches; return its result."""
        return self._put(fn).result()

    def _put(self, work: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put((work, future))
        return future

    def _loop(self) -> None:
        pending: Any = None  # an item taken while gathering that must wait for the next round
        while True:
            item, pending = (pending, None) if pending is not None else (self._queue.get(), None)
            if item is None:
                return
            if callable(item[0]):
                _run_call(*item)
                continue
            batch = [item]
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch_size:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None or callable(more[0]):  # stop / call: after this batch
                    pending = more
                    break
                batch.append(more)
            self.batch_sizes.append(len(batch))
            try:
                results = self._run_batch([request for request, _ in batch])
            except BaseException as exc:  # noqa: BLE001 - handed to every caller
                for _, future in batch:
                    future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                future.set_result(result)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()


def _run_call(fn: Callable[[], Any], future: Future) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 - handed to the caller
        future.set_exception(exc)


class TransformersModel:
    """A causal LM from transformers, sampling token ids with their log-probs.

    Args:
        path_or_model: a model folder (or hub-style name already in the local cache), a ``.gguf``
            file, or a loaded ``PreTrainedModel`` (e.g. the learner's policy, to sample from the live weights).
        tokenizer: a tokenizer or a folder; default: loaded from ``path_or_model``.
        gguf_file: file name of a GGUF checkpoint inside the folder (dequantized on load).
        dtype: ``float32`` (default), ``bfloat16`` or ``float16``; ignored for a loaded model.
        device: where a model loaded from a path is put (``cpu``, ``cuda``, ...); default
            ``cuda`` when available, else ``cpu``. Ignored for a loaded model. Either way
            generation runs wherever the module's parameters are when it is called (a learner
            may move a shared module after this sampler was built).
        seed: seeds the generator that gives each request without ``SamplingParams.seed`` its
            own seed, so a single-threaded run is reproducible.
        name: the model's name in trajectories; default: the folder name.
        batch_window_s: how long concurrent ``generate`` calls are gathered into one batch.
    """

    def __init__(
        self,
        path_or_model: str | Path | Any,
        tokenizer: Any = None,
        gguf_file: str | None = None,
        dtype: str = "float32",
        device: str | None = None,
        seed: int | None = None,
        name: str | None = None,
        batch_window_s: float = 0.01,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(path_or_model, (str, Path)):
            if dtype not in DTYPES:
                raise unknown_choice("dtype", dtype, DTYPES)
            if str(path_or_model).endswith(".gguf") and gguf_file is None:
                # A GGUF file path: transformers wants its folder plus the file name.
                gguf_file, path_or_model = Path(path_or_model).name, Path(path_or_model).parent
            source = str(path_or_model)
            kwargs: dict[str, Any] = {"dtype": DTYPES[dtype]}
            if gguf_file is not None:
                from transformers import GgufConfig

                kwargs.update(gguf_file=gguf_file, quantization_config=GgufConfig(dequantize=True))
            if device is None:
                device = "cuda" if torch.cuda.is_available() else "cpu"
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
            # transformers' stubs give .to the wrapper's signature (it takes the model)
            model = model.to(device)  # type: ignore[arg-type]
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file)
            default_name = Path(gguf_file or source).name or source
        else:
            model = path_or_model
            source = getattr(model.config, "_name_or_path", "") or type(model).__name__
            default_name = Path(source).name or source
            if tokenizer is None:
                tokenizer = AutoTokenizer.from_pretrained(source)
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or default_name
        self.eos_token_ids = eos_ids(tokenizer, getattr(model, "generation_config", None))
        if not self.eos_token_ids:
            raise ValueError(f"model {self.name!r}: no eos_token_id in tokenizer or config")
        self.pad_token_id = (
            tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else min(self.eos_token_ids)
        )
        self.policy_version = 0  # set by update_weights(..., version=); read per batch
        self._seeds = random.Random(seed)
        self._seed_lock = threading.Lock()
        self._batcher = RequestBatcher(self._run_requests, batch_window_s, name=f"{self.name}-gen")

    @property
    def device(self) -> torch.device:
        """Where the module's parameters are now (read at every use, never cached)."""
        return next(self.model.parameters()).device

    def __repr__(self) -> str:
        return f"TransformersModel(name={self.name!r}, device={str(self.device)!r})"

    # -- the Model protocol -------------------------------------------------------------------
    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        """Sample the next assistant message (thread-safe; concurrent calls are batched)."""
        check_prompt(conversation)
        return self._batcher.submit(conversation, params).result()

    def generate_batch(
        self,
        conversations: Sequence[Conversation],
        params: SamplingParams | Sequence[SamplingParams],
    ) -> list[Generation]:
        """Sample one message per conversation in one left-padded batch (same thread)."""
        if isinstance(params, SamplingParams):
            params = [params] * len(conversations)
        if len(params) != len(conversations):
            raise ValueError(f"{len(conversations)} conversations but {len(params)} params")
        for conversation in conversations:
            check_prompt(conversation)
        return self._run_requests(list(zip(conversations, params, strict=True)))

    def update_weights(
        self, weights: Mapping[str, torch.Tensor] | str | Path, version: int | None = None
    ) -> int:
        """Load new weights (a state dict, a ``.safetensors`` file or a folder of them) between
        two batches, without stopping concurrent ``generate`` calls (module docstring); returns
        the new ``policy_version`` (``version``, default: the current one + 1). Blocks until
        loaded, so the caller may change ``weights`` afterwards."""
        if isinstance(weights, (str, Path)):
            weights = load_safetensors(weights)
        return self._batcher.call(lambda: self._load(dict(weights), version))

    def _load(self, weights: dict[str, torch.Tensor], version: int | None) -> int:
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if unexpected:
            raise ValueError(f"unexpected weights for {self.name!r}: {unexpected[:5]}")
        real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied
        if real_missing:
            raise ValueError(f"missing weights for {self.name!r}: {real_missing[:5]}")
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        return self.policy_version

    def close(self) -> None:
        """Stop the batching thread (idempotent)."""
        self._batcher.close()

    # -- sampling -----------------------------------------------------------------------------
    def _generator(self, params: SamplingParams, device: torch.device) -> torch.Generator:
        if params.seed is not None:
            seed = params.seed
        else:
            with self._seed_lock:
                seed = self._seeds.randrange(2**63)
        return make_generator(device, seed)

    @torch.inference_mode()
    def _run_requests(self, requests: list[Request]) -> list[Generation]:
        # Decided per call: a learner may have moved the shared module since the last one.
        device = self.device
        version = self.policy_version  # no update can land before this batch ends (docstring)
        prompts = [check_prompt(conversation) for conversation, _ in requests]
        params = [p for _, p in requests]
        generators = [self._generator(p, device) for p in params]
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: every row ends at the same column
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention[row, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)

        sampled: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        finish: list[str | None] = [None] * batch
        max_stop = [max((len(s) for s in p.stop), default=0) for p in params]
        past = None
        step_ids, step_positions = input_ids, positions
        for _ in range(max(p.max_new_tokens for p in params)):
            out = self.model(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=step_positions,
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_ids = torch.full((batch,), self.pad_token_id, dtype=torch.long)
            for row in range(batch):
                if finish[row] is not None:
                    continue
                token, logprob = self._sample(logits[row], params[row], generators[row])
                sampled[row].append(token)
                logprobs[row].append(logprob)
                next_ids[row] = token
                finish[row] = self._finished(sampled[row], params[row], max_stop[row])
            if all(f is not None for f in finish):
                break
            step_ids = next_ids.to(device)[:, None]
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            step_positions = step_positions[:, -1:] + 1
        return [
            Generation(
                text=decode_text(self.tokenizer, ids),
                token_ids=ids,
                logprobs=lps,
                finish_reason=reason or "length",
                usage={"prompt_tokens": len(prompt), "completion_tokens": len(ids)},
                policy_version=version,
            )
            for prompt, ids, lps, reason in zip(prompts, sampled, logprobs, finish, strict=True)
        ]

    @staticmethod
    def _sample(
        logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
    ) -> tuple[int, float]:
        """One token and its log-prob under the distribution it was drawn from (module doc)."""
        if params.temperature == 0:
            token = int(torch.argmax(logits))
            return token, float(torch.log_softmax(logits, -1)[token])
        scaled = filter_logits(logits / params.temperature, params.top_k, params.top_p)
        logp = torch.log_softmax(scaled, -1)
        token = int(torch.multinomial(logp.exp(), 1, generator=generator))
        return token, float(logp[token])

    def _finished(self, ids: list[int], params: SamplingParams, max_stop: int) -> str | None:
        if ids[-1] in self.eos_token_ids:
            return "stop"
        if params.stop:
            # A stop string is short; decoding a window of recent tokens keeps this O(1) per step.
            # The text returned still covers every sampled token (stop string included).
            window = decode_text(self.tokenizer, ids[-(max_stop + 8) :])
            if any(s in window for s in params.stop):
                return "stop"
        if len(ids) >= params.max_new_tokens:
            return "length"
        return None


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    """A seeded random generator on ``device`` (sampling on CUDA needs a CUDA generator)."""
    return torch.Generator(device=device).manual_seed(seed)


def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` file or of every such file in a folder."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no .safetensors weights at {path}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    return tensors
