"""An OpenAI-compatible gateway in front of a rollout engine that records, per session, the
token-exact ``Trajectory`` a learner trains on: any agent written against the ``openai`` client
becomes trainable.

    gateway = Gateway(TransformersModel(path))
    url = gateway.start()            # http://127.0.0.1:<port>/v1
    client = openai.OpenAI(base_url=url, api_key="k", default_headers={"X-Session-Id": "ep-1"})
    ...                              # the agent program talks to the client
    trajectory = gateway.pop_session("ep-1")

Requests may carry ``tools`` (rendered by the model's chat template, calls parsed back; see
``agents.gateway.tools``) and ``stream: true`` (server-sent events); what a request may ask, and
its size limits, are in ``agents.gateway.validation``. ``algos.rollout.agent_programs`` trains
agent programs through it (``--agent module:factory``).
"""

from agents.gateway.server import SESSION_HEADER, Gateway
from agents.gateway.sessions import (
    PREFIX_FAILED,
    Reply,
    SessionRecorder,
    key_session_id,
    split_segments,
)
from agents.gateway.tools import ToolSupportError, parse_tool_calls
from agents.gateway.validation import APIError, Limits, sampling_params

__all__ = [
    "PREFIX_FAILED",
    "SESSION_HEADER",
    "APIError",
    "Gateway",
    "Limits",
    "Reply",
    "SessionRecorder",
    "ToolSupportError",
    "key_session_id",
    "parse_tool_calls",
    "sampling_params",
    "split_segments",
]
