"""Rollouts with an agent harness run as a command inside each episode's sandbox
(``--agent-cmd "CMD ..."``, with ``--agent-mount PATH`` for its files).

Per episode: the env starts its sandbox with two read-only binds (``swe_gym.sandbox.harness``):
a fresh host folder at ``/run/swe-gym`` holding the issue, a launcher, a forwarder and the unix
socket of the episode's endpoint, and the harness folder (``agent_mount``) at ``/opt/harness``,
its ``bin/`` first on ``PATH``. CMD runs under ``setsid`` in ``/testbed`` with

- ``OPENAI_BASE_URL`` (``http://127.0.0.1:PORT/v1``, inside the sandbox: the forwarder passes
  it to the socket), ``OPENAI_API_KEY`` (the episode's key, the only one the socket takes) and
  ``OPENAI_MODEL``;
- ``SWE_GYM_ISSUE_FILE`` (``/run/swe-gym/issue.md``), ``SWE_GYM_ISSUE`` (the text, when at most
  32 KiB) and ``SWE_GYM_TASK_ID``.

The socket's host side (``agents.gateway.unix_endpoint``) passes requests to the run's gateway
under that key, so every turn is recorded token-exact in the episode's session exactly as for
``--agent module:factory`` (``algos.rollout.agent_programs``: same gateway, same run sampling,
same trajectory and training). When CMD exits, when ``episode_timeout_s`` passes (default
``DEFAULT_TIMEOUT_S``) or when the model was called ``max_turns`` times, its process group is
killed and the env grades the working copy through its own ``submit`` step, so the reward is
computed as for the built-in agent. ``finish_reason``: ``submitted`` (CMD exited), ``timeout``,
``max_turns``, or ``error`` with the reason in ``error`` and ``agent["cmd"]["end"]``:
``not_found`` (exit 127), ``no_model_calls`` (CMD ended without calling the model: nothing to
train, not graded), ``launch_failed``, ``lost`` (the sandbox's shell restarted). CMD's stdout
and stderr (head and tail, ``LOG_BYTES`` each) are kept in ``agent["cmd"]``; the run report
shows them.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from agents.gateway import Gateway, key_session_id
from agents.gateway.unix_endpoint import SessionEndpoint
from agents.trajectory import Trajectory
from algos.config import ConfigError
from algos.rollout.agent_programs import (
    _engine_view,
    _RunSampling,
    _wrap_env,
    run_through_gateway,
    take_session,
)

DEFAULT_TIMEOUT_S = 1800.0  # a harness that never exits must not hold the trainer forever
_ERROR_ENDS = {
    "launch_failed": "the harness launcher failed",
    "lost": "the sandbox's shell was restarted under the harness",
}


def _make_env(spec: Any, binds: list[tuple[str, str, bool]]) -> Any:
    """The run's env with the harness binds in the agent's sandbox only: the grading sandbox
    keeps the run's options (nothing of the harness reaches the tests)."""
    import gymnasium

    kw = dict(spec.env_kwargs)
    options = dict(kw.get("sandbox_options") or {})
    kw.setdefault("grading_sandbox_options", dict(options))
    kw["sandbox_options"] = {**options, "binds": [*options.get("binds", []), *binds]}
    return gymnasium.make(spec.env, **kw)


def _end(traj: Trajectory, reason: str, message: str) -> None:
    traj.finish_reason, traj.error = "error", message
    traj.agent["cmd"]["end"] = reason


def _cmd_episode(
    gateway: Gateway,
    sampling: _RunSampling,
    spec: Any,
    task_id: str | None,
    seed: int,
) -> Trajectory:
    from swe_gym.sandbox.harness import (
        SOCKET_NAME,
        HarnessProcess,
        harness_binds,
        write_run_files,
    )
    from swe_gym.tools.parsing import ToolCall, format_action

    api_key = "sk-episode-" + secrets.token_hex(16)
    sid = key_session_id(api_key)
    gateway.open_session(sid, task_id=task_id, seed=seed, session=sid)
    traj = Trajectory(task_id=task_id, seed=seed)
    traj.agent = {"cmd": {"command": spec.agent_cmd, "end": None}}
    started = time.perf_counter()
    timeout = spec.episode_timeout_s or DEFAULT_TIMEOUT_S
    deadline = time.monotonic() + timeout
    run_dir = tempfile.mkdtemp(prefix="swe_gym_harness_")  # short: a socket path is <108 bytes
    endpoint = SessionEndpoint(
        os.path.join(run_dir, SOCKET_NAME),
        gateway.url or "",
        api_key,
        max_turns=spec.agent_kwargs.get("max_turns"),
        max_body_bytes=gateway.limits.max_body_bytes,
    )
    env = None
    try:
        endpoint.start()
        binds = harness_binds(run_dir, spec.agent_mount)
        env = _wrap_env(
            _make_env(spec, binds),
            task_id,
            seed,
            None,
            traj,
            lambda task: gateway.open_session(sid, task=_engine_view(task, sampling)),
        )
        env.reset()
        unwrapped = env.unwrapped
        if getattr(unwrapped, "sandbox", None) is None:
            raise ConfigError(f"env {spec.env!r} has no sandbox to run agent_cmd in")
        task = unwrapped.task
        run_env = {
            "OPENAI_API_KEY": api_key,
            "OPENAI_MODEL": gateway.name,
            "SWE_GYM_TASK_ID": task.instance_id,
        }
        write_run_files(
            run_dir, spec.agent_cmd, task.problem_statement, run_env, spec.agent_mount is not None
        )
        proc = HarnessProcess(unwrapped.sandbox)
        result = proc.run_to_end(deadline, endpoint.limit_reached.is_set)
        if result.end == "stopped":
            result.end = "max_turns"
        traj.agent["cmd"].update(result.to_dict())
        traj.agent["cmd"]["refused"] = dict(endpoint.refused)
        turns = endpoint.turns
        if result.end in _ERROR_ENDS:
            _end(traj, result.end, f"{_ERROR_ENDS[result.end]}: {result.status}")
        elif result.end == "exited" and result.exit_code == 127 and not turns:
            try:
                first = shlex.split(spec.agent_cmd)[0]
            except (ValueError, IndexError):  # unbalanced quotes: bash said what it could
                first = spec.agent_cmd.split()[0]
            _end(
                traj,
                "not_found",
                f"agent_cmd {first!r} was not found in the sandbox (exit 127; PATH has "
                f"/opt/harness/bin when agent_mount is set): {result.stderr[-500:]}",
            )
        elif not turns:
            _end(
                traj,
                "no_model_calls",
                f"agent_cmd ended ({result.end}, exit code {result.exit_code}) after "
                f"{result.wall_s:.1f} s without calling the model; stderr: {result.stderr[-500:]}",
            )
        else:
            # The env's own submit: grading identical to the built-in agent's.
            env.step(format_action(ToolCall("submit"), unwrapped.action_format))
            if result.end in ("timeout", "max_turns"):
                traj.finish_reason = result.end
                if result.end == "timeout":
                    traj.error = f"agent_cmd ran past episode_timeout_s={timeout:g}"
    except Exception as e:  # noqa: BLE001 - one episode's failure must not end the run
        traj.finish_reason, traj.error = "error", f"{type(e).__name__}: {e}"
    finally:
        endpoint.close()
        if env is not None:
            try:
                env.close()
            except Exception as e:  # noqa: BLE001
                traj.error = (traj.error or "") + f"\nenv.close() failed: {type(e).__name__}: {e}"
        shutil.rmtree(run_dir, ignore_errors=True)
    recorded = take_session(traj, gateway, sampling, sid)
    if recorded.system_prompt or recorded.prompt:  # what the model saw, not the env's prompt
        traj.system_prompt, traj.prompt = recorded.system_prompt, recorded.prompt
    traj.agent = {**recorded.agent, "cmd": traj.agent["cmd"], "program": spec.agent_cmd}
    traj.wall_s = time.perf_counter() - started
    return traj


def run_cmd_rollouts(
    spec: Any,
    engine: Any,
    task_ids: Sequence[str],
    n_per_task: int,
    seed: int,
    progress: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """``n_per_task`` episodes per task (task-major order, episode ``j`` seeded ``seed + j``) of
    ``spec.agent_cmd``, ``spec.concurrency`` at once, through a gateway in front of ``engine``.

    ``spec``: an ``algos.rollout.collect.RolloutSpec`` with ``agent_cmd`` set (and
    ``agent_mount``, ``env``, ``env_kwargs``, ``concurrency``, ``episode_timeout_s``, and
    ``agent_kwargs`` holding ``params``, ``max_turns`` and ``max_context_tokens``)."""
    import swe_gym  # noqa: F401 - registers the env ids

    def episode(gateway: Gateway, sampling: _RunSampling, tid: str, s: int) -> Trajectory:
        return _cmd_episode(gateway, sampling, spec, tid, s)

    return run_through_gateway(
        spec, engine, task_ids, n_per_task, seed, progress, episode, "agent-cmd"
    )
