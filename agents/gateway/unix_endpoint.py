"""One episode's model endpoint on a unix socket: the gateway, narrowed to one session.

A harness process inside a sandbox (``swe_gym.sandbox.harness``) reaches the model through a
socket bound into the sandbox. Whatever runs there, the policy's commands included, can connect
to it, so the socket serves only what the episode needs:

- ``POST /v1/chat/completions`` and ``GET /v1/models``; nothing else (no ``/v1/sessions``:
  recorded sessions can be neither read nor deleted from inside);
- only with the episode's own API key (``Authorization: Bearer``, compared in constant time);
  any other key, or none, is a 401 ``invalid_api_key``. ``X-Session-Id`` is dropped, so a
  request cannot land in another session: the gateway names the session by the key;
- at most ``max_turns`` completions (in flight or done): past them a 403 ``turn_limit_reached``
  (not retried by the ``openai`` client) and ``limit_reached`` is set, so the caller ends the
  episode;
- bodies of at most ``max_body_bytes`` with a ``Content-Length`` (the gateway's own limit).

Requests go on to the gateway's HTTP server over localhost unchanged otherwise, so validation,
sampling and recording are the gateway's; a streamed reply is passed on whole (the gateway
generates it whole before its first event). Standard library only: one thread per connection.
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import json
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    body["error"]["code"] = code
    return status, json.dumps(body).encode()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    endpoint: SessionEndpoint


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every reply has a Content-Length
    server: _Server
    timeout = 3600  # an idle keep-alive connection is dropped after this

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """No access log (the key must never reach a log; unix clients have no address)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle(("/v1/models",))

    def do_POST(self) -> None:  # noqa: N802
        self._handle(("/v1/chat/completions",))

    def do_DELETE(self) -> None:  # noqa: N802 - nothing is deleted here (no sessions API)
        self._handle(())

    do_PUT = do_PATCH = do_OPTIONS = do_DELETE

    def _handle(self, allowed: tuple[str, ...]) -> None:
        ep = self.server.endpoint
        path = urlsplit(self.path).path
        length = self.headers.get("content-length")
        body = b""
        if path not in allowed:
            status, out = _error(
                404, f"{self.command} {path[:80]!r} is not served here", "not_found"
            )
        elif self.headers.get("transfer-encoding"):
            status, out = _error(411, "send the body with a Content-Length", "length_required")
        elif length is not None and (not length.isdigit() or int(length) > ep.max_body_bytes):
            status, out = _error(413, f"bodies are at most {ep.max_body_bytes} bytes", "too_large")
        elif not ep.key_ok(self.headers.get("authorization", "")):
            # Read nothing of the body: a bad key learns nothing, and the connection closes.
            self.close_connection = True
            status, out = _error(
                401, "this endpoint takes only its episode's API key", "invalid_api_key"
            )
        else:
            body = self.rfile.read(int(length or 0))
            status, out = ep.forward(self.command, path, body, self.headers)
        if status >= 400 and length and not body and not self.close_connection:
            self.close_connection = True  # an unread body would be taken for the next request
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if status >= 400 else ep.last_type())
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class SessionEndpoint:
    """Serves ``upstream`` (the gateway's base URL) on the unix socket ``path`` for the one
    session of ``api_key``. ``start()``/``close()`` (idempotent), or a ``with`` block.

    Attributes: ``turns`` (completions answered with 200), ``refused`` (requests turned away,
    by code), ``limit_reached`` (a ``threading.Event``)."""

    def __init__(
        self,
        path: str | os.PathLike,
        upstream: str,
        api_key: str,
        max_turns: int | None = None,
        max_body_bytes: int = 4 * 1024 * 1024,
        timeout_s: float = 3600,
    ):
        url = urlsplit(upstream)
        if url.scheme != "http" or not url.hostname or not url.port:
            raise ValueError(f"upstream must be http://HOST:PORT/...; got {upstream!r}")
        self.path, self.api_key = str(path), api_key
        self._host, self._port = url.hostname, url.port
        self._prefix = url.path.rstrip("/").removesuffix("/v1")
        self.max_turns, self.max_body_bytes, self.timeout_s = max_turns, max_body_bytes, timeout_s
        self.turns = 0
        self.refused: dict[str, int] = {}
        self.limit_reached = threading.Event()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._types = threading.local()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def key_ok(self, authorization: str) -> bool:
        ok = authorization[:7].lower() == "bearer " and hmac.compare_digest(
            authorization[7:].strip().encode(), self.api_key.encode()
        )
        if not ok:
            self._count("invalid_api_key")
        return ok

    def _count(self, code: str) -> None:
        with self._lock:
            self.refused[code] = self.refused.get(code, 0) + 1

    def last_type(self) -> str:
        return getattr(self._types, "value", "application/json")

    def forward(self, method: str, path: str, body: bytes, headers: Any) -> tuple[int, bytes]:
        """The gateway's answer (status, body), the episode's key in place of the client's."""
        turn = path == "/v1/chat/completions"
        if turn:
            with self._lock:
                if self.max_turns is not None and self.turns + self._in_flight >= self.max_turns:
                    self.limit_reached.set()
                    self.refused["turn_limit_reached"] = (
                        self.refused.get("turn_limit_reached", 0) + 1
                    )
                    return _error(
                        403,
                        f"the episode's turn limit ({self.max_turns}) is reached",
                        "turn_limit_reached",
                    )
                self._in_flight += 1
        status = 502
        try:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
            try:
                send = {
                    "Authorization": f"Bearer {self.api_key}",
                    "Content-Type": "application/json",
                }
                accept = headers.get("accept")
                if accept:
                    send["Accept"] = accept
                conn.request(method, self._prefix + path, body=body or None, headers=send)
                resp = conn.getresponse()
                status, out = resp.status, resp.read()
                self._types.value = resp.getheader("content-type", "application/json")
                return status, out
            finally:
                conn.close()
        except (OSError, http.client.HTTPException) as e:
            self._types.value = "application/json"
            return _error(
                502, f"the gateway did not answer: {type(e).__name__}", "gateway_unreachable"
            )
        finally:
            if turn:
                with self._lock:
                    self._in_flight -= 1
                    self.turns += status == 200
                    if self.max_turns is not None and self.turns >= self.max_turns:
                        self.limit_reached.set()

    # serving ----------------------------------------------------------------------------------
    def start(self) -> str:
        """Listen on ``path`` (mode 0666: the sandbox's uid may differ) in a thread; returns it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        server = _Server(self.path, _Handler)
        server.endpoint = self
        os.chmod(self.path, 0o666)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
            name="session-endpoint",
        )  # fmt: skip
        self._thread.start()
        return self.path

    def close(self) -> None:
        """Stop listening and remove the socket; requests in flight finish on their threads."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __enter__(self) -> SessionEndpoint:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["SessionEndpoint"]
