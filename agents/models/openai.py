"""``OpenAIModel``: any OpenAI-compatible endpoint (OpenAI, vLLM's server, ...) over HTTP.

Text level by default: it sends ``conversation.messages`` to ``/chat/completions`` and returns
text only (``token_exact=False``). With ``token_ids=True`` against a vLLM server it is token-exact:
a conversation that carries ``token_ids`` goes to ``/completions`` with the ids as the prompt
(no server-side templating), and the reply carries the sampled ids (``return_token_ids``) and
their log-probs. For the log-probs to mean the same as ``VLLMModel``'s, start the server with
``--logprobs-mode processed_logprobs``.

Transient failures (HTTP 408/429/5xx, timeouts, connection errors) are retried with exponential
backoff (tenacity), honouring ``Retry-After``. The API key is read from the environment variable
named by ``api_key_env`` and lives only in the HTTP client's headers: never in reprs, logs,
errors or generations.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import time
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from agents.protocols import Conversation, Generation, SamplingParams
from swe_gym.errors import SWEGymError

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class EndpointError(SWEGymError, RuntimeError):
    """The endpoint failed for good: a non-retryable answer, or retries were exhausted."""


class _Retryable(Exception):
    """A transient HTTP answer worth another try; carries the server's Retry-After, if any."""

    def __init__(self, status: int, message: str, retry_after: float | None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), if present."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, (_Retryable, httpx.TimeoutException, httpx.TransportError))


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class OpenAIModel:
    """A chat model behind an OpenAI-compatible HTTP API.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name sent with each request.
        api_key_env: environment variable holding the API key (no key: no auth header, fine for
            a local vLLM server).
        timeout_s: per-request timeout (connect, read, write).
        max_retries: retries after the first attempt for transient failures.
        token_ids: ask a vLLM server for token ids and log-probs (token-exact trajectories).
        backoff_s: (initial, max) exponential backoff between retries; ``Retry-After`` wins,
            capped at ``max_retry_after_s``.
        name: the model's name in trajectories; default: ``model``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 4,
        token_ids: bool = False,
        backoff_s: tuple[float, float] = (0.5, 8.0),
        max_retry_after_s: float = 60.0,
        name: str | None = None,
    ):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = name or model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.token_ids = token_ids
        self.backoff_s = backoff_s
        self.max_retry_after_s = max_retry_after_s
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout_s))
        self.tokenizer = None  # text level: the server owns the tokenizer

    def __repr__(self) -> str:
        return (
            f"OpenAIModel(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, token_ids={self.token_ids})"
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Model protocol -------------------------------------------------------------------
    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        """Send one request (retrying transient failures) and return the assistant message."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k  # vLLM extension; OpenAI itself has no top_k
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if self.token_ids and conversation.token_ids:
            body.update(
                prompt=list(conversation.token_ids),
                logprobs=0,
                return_token_ids=True,
                include_stop_str_in_output=True,
            )
            return self._completion(self._post("/completions", body))
        if not conversation.messages:
            raise ValueError("conversation.messages is empty; a chat endpoint needs messages")
        body["messages"] = conversation.messages
        if self.token_ids:
            body.update(logprobs=True, top_logprobs=0, return_token_ids=True)
        return self._chat(self._post("/chat/completions", body))

    # -- HTTP ---------------------------------------------------------------------------------
    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_retry_after_s)
        initial, maximum = self.backoff_s
        # Exponential with jitter, so parallel episodes hitting one endpoint do not retry in step.
        return min(maximum, initial * 2 ** (state.attempt_number - 1)) + random.uniform(0, initial)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        started = time.monotonic()

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s: POST %s attempt %d failed (%s); retrying in %.1f s",
                self.name,
                url,
                state.attempt_number,
                type(exc).__name__ if not isinstance(exc, _Retryable) else exc,
                state.upcoming_sleep,
            )

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            before_sleep=before_sleep,
            reraise=False,
        )
        try:
            return retrying(self._post_once, url, body)
        except RetryError as err:
            last = err.last_attempt.exception()
            raise EndpointError(
                f"POST {url} failed after {self.max_retries + 1} attempts in "
                f"{time.monotonic() - started:.1f} s: {type(last).__name__}: {last}"
            ) from None

    def _post_once(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._client.post(url, json=body)
        if response.status_code in RETRY_STATUS:
            raise _Retryable(response.status_code, _short(response.text), _retry_after(response))
        if response.status_code >= 400:
            hint = ""
            if response.status_code in (401, 403):
                hint = f" (is ${self.api_key_env} set to a valid key?)"
            raise EndpointError(
                f"POST {url}: HTTP {response.status_code}{hint}: {_short(response.text)}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise EndpointError(f"POST {url}: answer is not JSON: {_short(response.text)}") from exc

    # -- answers ------------------------------------------------------------------------------
    def _choice(self, answer: dict[str, Any]) -> dict[str, Any]:
        choices = answer.get("choices") or []
        if not choices:
            raise EndpointError(f"{self.name}: answer has no choices: {_short(str(answer))}")
        return choices[0]

    @staticmethod
    def _finish(choice: dict[str, Any]) -> str:
        return "length" if choice.get("finish_reason") == "length" else "stop"

    def _chat(self, answer: dict[str, Any]) -> Generation:
        choice = self._choice(answer)
        ids = [int(t) for t in choice.get("token_ids") or []]
        content = ((choice.get("logprobs") or {}).get("content")) or []
        logprobs = [float(entry["logprob"]) for entry in content] if ids else []
        exact = bool(ids) and len(logprobs) == len(ids)
        return Generation(
            text=(choice.get("message") or {}).get("content") or "",
            token_ids=ids if exact else [],
            logprobs=logprobs if exact else [],
            finish_reason=self._finish(choice),
            token_exact=exact,
            usage=answer.get("usage") or {},
        )

    def _completion(self, answer: dict[str, Any]) -> Generation:
        choice = self._choice(answer)
        ids = [int(t) for t in choice.get("token_ids") or []]
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        exact = bool(ids) and len(logprobs) == len(ids)
        return Generation(
            text=choice.get("text") or "",
            token_ids=ids if exact else [],
            logprobs=logprobs if exact else [],
            finish_reason=self._finish(choice),
            token_exact=exact,
            usage=answer.get("usage") or {},
        )
