"""Connect to the Docker daemon once, and say clearly when it is not there.

``get_client()`` returns a shared ``docker.DockerClient`` (thread-safe for our use: each call
opens its own connection from the pool). When the daemon cannot be reached it raises one
``SandboxUnavailable`` naming the address and how to start it, instead of a urllib3 traceback.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from swe_gym.errors import SandboxUnavailable

DEFAULT_HOST = "unix:///var/run/swe-gym-docker.sock"  # where .ci/docker-up.sh puts it
_lock = threading.Lock()
_clients: dict[str, Any] = {}


def docker_host() -> str:
    """``$DOCKER_HOST``; else the project socket if it exists; else Docker's default socket."""
    env = os.environ.get("DOCKER_HOST")
    if env:
        return env
    if os.path.exists(DEFAULT_HOST.removeprefix("unix://")):
        return DEFAULT_HOST
    return "unix:///var/run/docker.sock"


def unavailable(host: str, cause: object = None) -> SandboxUnavailable:
    msg = (
        f"Docker daemon not reachable at {host}; start it with .ci/docker-up.sh "
        f'(eval "$(.ci/docker-up.sh)") or set DOCKER_HOST'
    )
    if cause is not None:
        msg += f" ({type(cause).__name__}: {str(cause)[:200]})"
    return SandboxUnavailable(msg)


def get_client(host: str | None = None, *, timeout: float = 120.0, check: bool = True) -> Any:
    """A cached client for ``host`` (default ``docker_host()``), pinged once when created."""
    import docker

    host = host or docker_host()
    with _lock:
        client = _clients.get(host)
        if client is not None:
            return client
        try:
            client = docker.DockerClient(base_url=host, timeout=timeout, max_pool_size=64)
            if check:
                client.ping()
        except (
            Exception
        ) as e:  # the SDK raises DockerException / requests errors / FileNotFoundError
            raise unavailable(host, e) from None
        client.swe_gym_host = host  # for error messages: the SDK keeps no readable URL
        _clients[host] = client
        return client


def host_of(client: Any) -> str:
    """The address ``client`` talks to (its ``get_client`` host, else ``docker_host()``)."""
    return getattr(client, "swe_gym_host", None) or docker_host()


def ping(host: str | None = None) -> bool:
    """True when the daemon answers (never raises)."""
    try:
        get_client(host).ping()
        return True
    except Exception:
        return False


def is_connection_error(exc: BaseException) -> bool:
    """The daemon went away or restarted (as opposed to an API error it answered with)."""
    import docker.errors
    import requests

    if isinstance(exc, requests.exceptions.ConnectionError):
        return True
    if isinstance(exc, docker.errors.DockerException) and not isinstance(
        exc, docker.errors.APIError
    ):
        return "connection" in str(exc).lower()
    return isinstance(exc, (ConnectionError, FileNotFoundError))
