"""``python -m agents.gateway``: serve a model behind the OpenAI-compatible, recording gateway.

    python -m agents.gateway --model smollm2                      # http://127.0.0.1:8000/v1
    python -m agents.gateway --model vllm:smollm2 --port 9000
    python -m agents.gateway --model scripted:replies.json        # no weights: scripted replies

``--model`` takes ``smollm2``, ``hf:PATH``, ``vllm:PATH``, a plain checkpoint folder (``hf:``), or
``scripted:FILE`` (replies from a file, tokenised with SmolLM2's tokenizer so the recording is
token-exact). The URL is printed on its own line (``gateway: http://...``) once the server
answers; point any OpenAI client there. Recorded sessions are fetched over HTTP
(``GET /v1/sessions``, ``GET``/``DELETE /v1/sessions/{id}``).

Ctrl-C or SIGTERM stops it: no new connections, running requests get ``--shutdown-grace``
seconds to finish (then a 503 ``gateway_shutting_down``; nothing recorded), the engine is closed,
and the exit status is 0. A request body over ``--max-body-bytes`` is a 413.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

# How long closing the engine may take at exit: with the default grace, exit stays within the
# 10 s a container runtime gives before SIGKILL.
ENGINE_CLOSE_S = 3


def build_model(spec: str, dtype: str | None = None) -> Any:
    """A token backend for ``spec`` (see the module doc); ValueError naming the accepted forms."""
    from agents.models import load_model

    if spec.startswith("scripted:"):
        from transformers import AutoTokenizer

        from agents.models.scripted import ScriptedModel
        from agents.models.smollm2 import smollm2_tokenizer_path

        tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
        return ScriptedModel.from_file(spec.split(":", 1)[1], tokenizer=tokenizer)
    if ":" not in spec and spec != "smollm2" and os.path.isdir(spec):
        spec = f"hf:{spec}"
    if spec.startswith(("openai:", "oracle")):
        raise ValueError(
            f"--model {spec!r} has no token ids to record; use smollm2, hf:PATH, vllm:PATH, a "
            "checkpoint folder or scripted:FILE"
        )
    kw = {"dtype": dtype} if dtype else {}
    return load_model(spec, **kw)


def main(argv: list[str] | None = None) -> int:
    from agents.gateway.validation import Limits

    p = argparse.ArgumentParser(
        prog="python -m agents.gateway", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--model", default="smollm2", help="smollm2 | hf:PATH | vllm:PATH | PATH | scripted:FILE"
    )
    p.add_argument(
        "--dtype", default=None, help="engine dtype (e.g. float32, bfloat16); default: the engine's"
    )
    p.add_argument(
        "--name", default=None, help="the model id clients ask for (default: the engine's)"
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="bind address (no authentication: keep it local)"
    )
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument(
        "--max-tokens", type=int, default=1024, help="max_tokens when a request sets none"
    )
    p.add_argument("--context-limit", type=int, default=None,
                   help="prompt + max_tokens per request (default: the model's own)")  # fmt: skip
    p.add_argument("--max-body-bytes", type=int, default=Limits.max_body_bytes,
                   help="larger request bodies get a 413 (default: %(default)s)")  # fmt: skip
    p.add_argument("--shutdown-grace", type=float, default=5.0,
                   help="seconds running requests get to finish at Ctrl-C/SIGTERM (default: 5)")  # fmt: skip
    args = p.parse_args(argv)
    if not 0 <= args.port < 65536:
        p.error(f"--port must be in [0, 65535], got {args.port}")
    if args.max_tokens < 1:
        p.error(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if args.max_body_bytes < 1:
        p.error(f"--max-body-bytes must be >= 1, got {args.max_body_bytes}")
    if not args.shutdown_grace >= 0:
        p.error(f"--shutdown-grace must be >= 0 seconds, got {args.shutdown_grace}")
    try:
        model = build_model(args.model, args.dtype)
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from agents.gateway.server import Gateway

    gateway = Gateway(
        model,
        args.name,
        args.max_tokens,
        args.context_limit,
        limits=Limits(max_body_bytes=args.max_body_bytes),
        shutdown_grace_s=args.shutdown_grace,
    )
    return serve(gateway, args.host, args.port)


def serve(gateway: Any, host: str, port: int) -> int:
    """Serve until Ctrl-C or SIGTERM, then shut down as the module doc says; returns 0."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before start: no signal finds the default
        signal.signal(sig, lambda *_: stop.set())
    url = gateway.start(host, port)
    limit = gateway.recorder.context_limit
    print(f"gateway: {url}", flush=True)
    print(f"model {gateway.name!r}, context limit {limit or 'none'}; Ctrl-C stops", flush=True)
    stop.wait()
    print(
        f"gateway: stopping (running requests get {gateway.shutdown_grace_s} s)",
        file=sys.stderr,
        flush=True,
    )
    gateway.close()
    engine_close = getattr(gateway.recorder.model, "close", None)
    if callable(engine_close):  # vLLM's aborts its running requests and frees its processes
        closer = threading.Thread(target=engine_close, name="engine-close", daemon=True)
        closer.start()
        closer.join(ENGINE_CLOSE_S)
    if gateway.running_generations:
        print(
            f"gateway: {gateway.running_generations} generation(s) still in the engine "
            "(their clients got a 503); exiting without them",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        # The interpreter would wait for those threads, or abort finalizing under one running
        # native code (rc 134): their clients are answered, nothing is left to keep.
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
