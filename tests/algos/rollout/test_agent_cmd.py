"""``--agent-cmd``: a harness command run inside each episode's sandbox, on both backends.

The harness is ``examples/harnesses/ask_once.sh`` (bash, curl, jq) or a probe in bash; the
model is a ``ScriptedModel`` behind the real gateway; sandboxes, sockets and grading are real.
For Docker the harness folder carries curl and jq (``swe_gym.sandbox.harness_tools``): the
task images have neither."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.chat import ChatTemplate
from agents.models import ScriptedModel
from agents.protocols import SamplingParams
from algos.config import ConfigError
from algos.rollout.agent_cmd import run_cmd_rollouts
from swe_gym.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[3]
ASK_ONCE = ROOT / "examples" / "harnesses" / "ask_once.sh"
RUN_ID = f"pytest-agentcmd-{uuid.uuid4().hex[:8]}"
TASK = load_tasks("starter")[0]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request):
    if request.param == "docker":
        from swe_gym.images.base import build_base

        build_base(request.getfixturevalue("docker_client"))  # fails under CI without a daemon
    return request.param


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory):
    """The example harness, with curl and jq for images that lack them."""
    from swe_gym.sandbox.harness_tools import bundle_tools

    d = tmp_path_factory.mktemp("harness")
    shutil.copy(ASK_ONCE, d / "ask_once.sh")
    bundle_tools(d, ["curl", "jq"])
    os.chmod(d, 0o755)
    return d


def _children() -> set[int]:
    """Live processes whose parent is this test process (sandboxes, shells)."""
    out = set()
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        if rest and rest[0] not in "ZX" and int(rest[1]) == os.getpid():
            out.add(int(name))
    return out


def _harness_dirs() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("swe_gym_harness_*")}


def _spec(backend, cmd, mount, timeout=120.0, max_turns=5, concurrency=1):
    options = {"run_id": RUN_ID} if backend == "docker" else {}
    return SimpleNamespace(
        env="SWEStarter-v0",
        env_kwargs={"backend": backend, "max_turns": 5, "sandbox_options": options},
        agent_cmd=cmd,
        agent_mount=str(mount) if mount else None,
        concurrency=concurrency,
        episode_timeout_s=timeout,
        agent_kwargs={
            "params": SamplingParams(temperature=1.0, max_new_tokens=2048),
            "max_context_tokens": 8192,
            "max_turns": max_turns,
        },
    )


@pytest.fixture()
def no_leaks(backend):
    """After the test: no sandbox process, run folder (with its socket) or container left."""
    before_children, before_dirs = _children(), _harness_dirs()
    yield
    deadline = time.monotonic() + 10
    while (_children() - before_children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (_children() - before_children), "sandbox processes left behind"
    # New ones only: other runs on the machine share the temp dir.
    assert not (_harness_dirs() - before_dirs), "harness run folders left behind"
    if backend == "docker":
        from swe_gym import reap

        left = reap.find(None, run_id=RUN_ID)
        reap.reap(run_id=RUN_ID)
        assert not left, f"containers left behind: {[c.name for c in left]}"


def _gold_engine(tokenizer):
    replies = ["```diff\n" + TASK.patch + "```"] * 6
    return ScriptedModel(replies, tokenizer=tokenizer, name="policy")


def test_ask_once_harness_is_graded_and_token_exact(backend, harness_dir, tokenizer, no_leaks):
    spec = _spec(backend, "bash /opt/harness/ask_once.sh", harness_dir)
    (traj,) = run_cmd_rollouts(spec, _gold_engine(tokenizer), [TASK.instance_id], 1, 3)
    cmd = traj.agent["cmd"]
    assert traj.finish_reason == "submitted" and traj.reward == 1.0, (traj.error, cmd)
    assert traj.resolved and traj.patch.startswith("diff --git")
    assert cmd["end"] == "exited" and cmd["exit_code"] == 0 and not cmd["left"]
    assert "patch applied" in cmd["stdout"] and cmd["stderr"] == ""
    # One turn, recorded token-exact from the messages the harness sent.
    assert traj.token_exact and traj.num_turns == 1 and traj.agent["segment_starts"] == [0]
    messages = [
        {"role": "system", "content": traj.system_prompt},
        {"role": "user", "content": traj.prompt},
    ]
    assert traj.turns[0].prompt_delta_ids == ChatTemplate(tokenizer).initial_ids(messages)
    assert TASK.problem_statement.strip() in traj.prompt  # $(cat) drops the last newline
    assert "sk-episode" not in json.dumps(traj.to_dict())  # the key is not kept


PROBE = r"""
set -u
say() { echo "$1=$2"; }
say cwd "$(pwd)"
say issue "$(printf %s "$SWE_GYM_ISSUE" | cmp -s - "$SWE_GYM_ISSUE_FILE" && echo same || echo differ)"
say task "$SWE_GYM_TASK_ID"
u=$OPENAI_BASE_URL
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@"; }
say wrong_key "$(code -H 'Authorization: Bearer sk-other' -H 'Content-Type: application/json' \
  -d '{}' "$u/chat/completions")"
say no_key "$(code "$u/models")"
say sessions "$(code -H "Authorization: Bearer $OPENAI_API_KEY" "$u/sessions")"
say models "$(code -H "Authorization: Bearer $OPENAI_API_KEY" "$u/models")"
say host_port "$(curl -s -o /dev/null --max-time 3 http://127.0.0.1:HOSTPORT/ && echo open || echo closed)"
say host_ip "$(curl -s -o /dev/null --max-time 3 http://HOSTIP:HOSTPORT/ && echo open || echo closed)"
say ro_run "$(touch /run/swe-gym/x 2>/dev/null && echo writable || echo readonly)"
say ro_harness "$(touch /opt/harness/x 2>/dev/null && echo writable || echo readonly)"
say pgid "$(( $(cut -d' ' -f5 /proc/$$/stat) == $(cut -d' ' -f6 /proc/$$/stat) ))"
bash /opt/harness/ask_once.sh
"""


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: the route's source address
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def test_the_harness_runs_inside_the_sandbox_with_only_its_endpoint(
    backend, harness_dir, tokenizer, tmp_path, no_leaks
):
    """cwd /testbed, the issue in file and variable, the gateway's session endpoint only:
    another key, or none, is refused; the sessions API is not served; a port open on the host
    (loopback and its address) is out of reach; the bound folders are read-only."""
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    probe = tmp_path / "probe.sh"
    probe.write_text(PROBE.replace("HOSTPORT", str(port)).replace("HOSTIP", _host_ip()))
    mount = tmp_path / "mount"
    shutil.copytree(harness_dir, mount)
    shutil.copy(probe, mount / "probe.sh")
    os.chmod(mount, 0o755)
    try:
        spec = _spec(backend, "bash /opt/harness/probe.sh", mount)
        (traj,) = run_cmd_rollouts(spec, _gold_engine(tokenizer), [TASK.instance_id], 1, 0)
    finally:
        listener.close()
    out = dict(
        line.split("=", 1) for line in traj.agent["cmd"]["stdout"].splitlines() if "=" in line
    )
    assert out["cwd"] == "/testbed" and out["issue"] == "same" and out["task"] == TASK.instance_id
    assert out["wrong_key"] == "401" and out["no_key"] == "401", out
    assert out["sessions"] == "404" and out["models"] == "200", out
    assert out["host_port"] == "closed" and out["host_ip"] == "closed", out
    assert out["ro_run"] == "readonly" and out["ro_harness"] == "readonly", out
    assert out["pgid"] == "1", out  # its own session: the group the trainer kills
    assert traj.agent["cmd"]["refused"] == {"invalid_api_key": 2}
    assert traj.finish_reason == "submitted" and traj.reward == 1.0, traj.error
    assert traj.num_turns == 1 and traj.token_exact


@pytest.mark.parametrize(
    "cmd,end,words",
    [
        ("no-such-harness-xyz --go", "not_found", "'no-such-harness-xyz' was not found"),
        ("true", "no_model_calls", "without calling the model"),
        (  # garbage on the model's channel: refused, no turn, nothing recorded
            "curl -s -H \"Authorization: Bearer $OPENAI_API_KEY\" -d 'not json' "
            '"$OPENAI_BASE_URL/chat/completions"; printf "\\x00\\xff junk"',
            "no_model_calls",
            "without calling the model",
        ),
    ],
)
def test_bad_commands_end_with_a_reason(backend, tokenizer, cmd, end, words, no_leaks):
    spec = _spec(backend, cmd, None)
    (traj,) = run_cmd_rollouts(spec, _gold_engine(tokenizer), [TASK.instance_id], 1, 0)
    assert traj.finish_reason == "error" and words in traj.error, traj.error
    assert traj.agent["cmd"]["end"] == end and not traj.agent["cmd"]["left"]
    assert traj.turns == [] and traj.reward == 0.0


def test_timeout_and_turn_limit_kill_the_group_and_grade(backend, harness_dir, tokenizer, no_leaks):
    """A harness that asks once and then hangs (with a child in the background) is killed at
    the episode's time limit; one that keeps asking, at the turn limit. Both are graded."""
    hang = "bash /opt/harness/ask_once.sh; sleep 300 & sleep 301"
    loop = (
        'while curl -sf -o /dev/null -H "Authorization: Bearer $OPENAI_API_KEY" '
        '-H \'Content-Type: application/json\' -d "{\\"model\\": \\"$OPENAI_MODEL\\", '
        '\\"messages\\": [{\\"role\\": \\"user\\", \\"content\\": \\"hi\\"}]}" '
        '"$OPENAI_BASE_URL/chat/completions"; do :; done; bash /opt/harness/ask_once.sh; sleep 300'
    )
    specs = [
        _spec(backend, hang, harness_dir, timeout=8),
        _spec(backend, loop, harness_dir, max_turns=3),
    ]
    engine = _gold_engine(tokenizer)
    timed = run_cmd_rollouts(specs[0], engine, [TASK.instance_id], 1, 0)[0]
    assert timed.finish_reason == "timeout" and timed.agent["cmd"]["end"] == "timeout"
    assert not timed.agent["cmd"]["left"] and timed.resolved  # killed, then graded
    capped = run_cmd_rollouts(specs[1], engine, [TASK.instance_id], 1, 0)[0]
    assert capped.finish_reason == "max_turns" and capped.agent["cmd"]["end"] == "max_turns"
    assert capped.num_turns == 3 and not capped.agent["cmd"]["left"], capped.agent["cmd"]


def test_the_harness_group_is_reaped_and_the_shell_survives(backend, tmp_path):
    """``HarnessProcess`` alone: a timed-out command's whole group (background children
    included) is gone, the sandbox's shell still answers."""
    from swe_gym.sandbox import make_sandbox
    from swe_gym.sandbox.harness import HarnessProcess, harness_binds, write_run_files

    run = tmp_path / "run"
    run.mkdir()
    options = {"run_id": RUN_ID} if backend == "docker" else {}
    sb = make_sandbox(TASK, backend, binds=harness_binds(str(run)), **options)
    sb.start()
    try:
        write_run_files(run, "sleep 300 & (sleep 301 &) ; sleep 302", "issue", {})
        proc = HarnessProcess(sb)
        result = proc.run_to_end(time.monotonic() + 3)
        assert result.end == "timeout" and not result.left
        left = sb.run("pgrep -f 'sleep 30[012]' || echo none", timeout=10).output.strip()
        assert left == "none", left
        assert sb.run("pwd", timeout=10).output.strip() == "/testbed"
    finally:
        sb.close()


def test_config_checks_agent_cmd(tmp_path):
    from algos.dapo import DAPOConfig

    with pytest.raises(ConfigError, match="has none"):
        DAPOConfig(agent_cmd="bash run.sh", env="ToyKeyword-v0")
    with pytest.raises(ConfigError, match="keep one"):
        DAPOConfig(agent_cmd="bash run.sh", agent="examples.openai_agent:make_agent")
    with pytest.raises(ConfigError, match="set agent_cmd"):
        DAPOConfig(agent_mount=str(tmp_path))
    with pytest.raises(ConfigError, match="is not a folder"):
        DAPOConfig(agent_cmd="x", agent_mount=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="threads only"):
        DAPOConfig(agent_cmd="x", rollout_backend="ray")
    assert DAPOConfig(agent_cmd="bash x.sh", agent_mount=str(tmp_path)).agent_cmd == "bash x.sh"


@pytest.mark.slow
@pytest.mark.parametrize("staleness", ["0", "1"])
def test_grpo_trains_one_iteration_with_agent_cmd(tmp_path: Path, staleness):
    """GRPO end to end, synchronous and async collection: the example harness in local
    sandboxes, a scripted rollout model replying with the gold patch; the episodes are graded,
    trained on, saved and reported."""
    from algos import grpo
    from algos.loop.metrics import read_metrics
    from algos.report import load_run, write_report
    from tests.algos.test_grpo import COMMON

    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["```diff\n" + TASK.patch + "```"]))
    run = tmp_path / "run"
    args = [
        *COMMON,
        *("--env", "SWEStarter-v0", "--tasks", TASK.instance_id, "--max-staleness", staleness),
        *("--rollout-model", f"scripted:{replies}", "--max-new-tokens", "2048"),
        *("--max-context-tokens", "16384", "--run-dir", str(run)),
        *("--agent-cmd", "bash /opt/harness/ask_once.sh", "--agent-mount", str(ASK_ONCE.parent)),
    ]
    assert grpo.main(args) == 0
    (row,) = read_metrics(run)
    assert row["episodes"] == 2 and row["resolved_rate"] == 1.0 and row["turns_mean"] == 1.0
    (it,) = load_run(run)["iterations"]
    assert all(t.agent["cmd"]["end"] == "exited" for t in it["episodes"])
    assert "agent command bash /opt/harness/ask_once.sh: exited" in write_report(run).read_text()


@pytest.mark.slow
def test_rft_rolls_out_with_agent_cmd(tmp_path: Path):
    from agents.trajectory import Trajectory
    from algos import rft

    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["```diff\n" + TASK.patch + "```"]))
    run = tmp_path / "run"
    args = [
        *("--rollout-model", f"scripted:{replies}", "--tasks", TASK.instance_id),
        *("--runs-per-task", "1", "--policy", "tiny-random", "--epochs", "1"),
        *("--batch-size", "1", "--progress", "false", "--run-dir", str(run)),
        *("--max-new-tokens", "2048", "--max-context-tokens", "16384"),
        *("--agent-cmd", "bash /opt/harness/ask_once.sh", "--agent-mount", str(ASK_ONCE.parent)),
    ]
    assert rft.main(args) == 0
    (kept,) = Trajectory.load_jsonl(run / "rft_data.jsonl")
    assert kept.resolved and kept.token_exact and kept.agent["cmd"]["end"] == "exited"
