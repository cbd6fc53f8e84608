"""``--agent-cmd``: a hostile harness (what the policy's text can make a harness run) reaches
its own session and nothing else, on both backends.

It tries the socket with another key and with none, straight through ``curl --unix-socket``
too; the recorded sessions (list, read, delete); another session by ``X-Session-Id``; writes into
the bound folders; and a port open on the host's loopback (as the gateway's is). Every try is refused, its one
honest turn lands in its own session, and the grading sandbox has none of the binds."""

from __future__ import annotations

import os
import shutil

from algos.rollout.agent_cmd import _make_env, run_cmd_rollouts
from tests.algos.rollout.test_agent_cmd import _gold_engine, _spec, tokenizer  # noqa: F401

HOSTILE = r"""
say() { echo "$1=$2"; }
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@"; }
k="Authorization: Bearer $OPENAI_API_KEY"
s=/run/swe-gym/gateway.sock
say sock_other "$(code --unix-socket $s -H 'Authorization: Bearer sk-x' http://x/v1/models)"
say sock_none "$(code --unix-socket $s http://x/v1/models)"
say list "$(code -H "$k" "$OPENAI_BASE_URL/sessions")"
say read "$(code -H "$k" "$OPENAI_BASE_URL/sessions/victim")"
say delete "$(code -X DELETE -H "$k" "$OPENAI_BASE_URL/sessions/victim")"
say traversal "$(code -H "$k" "$OPENAI_BASE_URL/../v1/sessions")"
say write_run "$(echo x > /run/swe-gym/run.sh 2>/dev/null && echo yes || echo no)"
say write_sock "$(rm -f $s 2>/dev/null && echo yes || echo no)"
say host_port "$(code http://127.0.0.1:HOSTPORT/v1/models)"
body=$(jq -n --arg m "$OPENAI_MODEL" '{model: $m, messages: [{role: "user", content: "hi"}]}')
say hijack "$(code -H "$k" -H 'X-Session-Id: victim' -H 'Content-Type: application/json' \
  -d "$body" "$OPENAI_BASE_URL/chat/completions")"
"""


def test_a_hostile_harness_reaches_only_its_own_session(backend, tokenizer, tmp_path):  # noqa: F811
    import socket

    from swe_gym.sandbox.harness_tools import bundle_tools

    mount = tmp_path / "mount"
    mount.mkdir()
    bundle_tools(mount, ["curl", "jq"])
    # A port open on the host's loopback, as the gateway's is: the sandbox's 127.0.0.1 is its own.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    (mount / "hostile.sh").write_text(HOSTILE.replace("HOSTPORT", str(held.getsockname()[1])))
    os.chmod(mount, 0o755)
    try:
        spec = _spec(backend, "bash /opt/harness/hostile.sh", mount)
        (traj,) = run_cmd_rollouts(spec, _gold_engine(tokenizer), ["starter__confparse-1"], 1, 0)
    finally:
        held.close()
    out = dict(line.split("=", 1) for line in traj.agent["cmd"]["stdout"].splitlines())
    assert out["sock_other"] == out["sock_none"] == "401", out
    assert out["list"] == out["read"] == out["delete"] == out["traversal"] == "404", out
    assert out["write_run"] == out["write_sock"] == "no", out
    assert out["host_port"] == "000", out  # nothing listens there inside the sandbox
    assert out["hijack"] == "200", out  # served, but in its own session (the header dropped)
    assert traj.num_turns == 1 and traj.token_exact
    assert traj.agent["session"].startswith("key-")  # the key's session, not "victim"
    shutil.rmtree(mount, ignore_errors=True)


def test_the_grading_sandbox_has_none_of_the_harness_binds():
    from types import SimpleNamespace

    spec = SimpleNamespace(env="SWEStarter-v0", env_kwargs={"sandbox_options": {"memory_mb": 1024}})
    env = _make_env(spec, [("/some/host/dir", "/run/swe-gym", False)])
    try:
        inner = env.unwrapped
        assert inner.sandbox_options["binds"] == [("/some/host/dir", "/run/swe-gym", False)]
        assert inner.grading_sandbox_options == {"memory_mb": 1024}
    finally:
        env.close()
