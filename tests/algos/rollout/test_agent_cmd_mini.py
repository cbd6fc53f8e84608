"""mini-swe-agent's own command line (``mini``) as an ``--agent-cmd`` harness
(``examples/harnesses/mini_swe_agent.sh``), on the local backend.

The model is a ``ScriptedModel`` behind the real gateway, replying in mini-swe-agent's text
format (one ```` ```mswea_bash_command ```` block): ``git apply`` of the gold patch, then its
submit command. mini-swe-agent itself (its CLI, prompts, litellm model and local environment)
runs unmodified in the sandbox, through the host's Python, which a local sandbox binds
read-only. Docker task images lack mini-swe-agent and a Python it could run on (README,
"Installing a harness"), so there is no Docker case. mini-swe-agent is in the ``dev`` extra: a
missing install fails here, never skips."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from agents.chat import ChatTemplate
from agents.models import ScriptedModel
from algos.rollout.agent_cmd import run_cmd_rollouts
from tests.algos.rollout.test_agent_cmd import (  # noqa: F401 - fixtures used by name
    ROOT,
    TASK,
    _spec,
    no_leaks,
    tokenizer,
)

WRAPPER = ROOT / "examples" / "harnesses" / "mini_swe_agent.sh"
COMMAND = "bash /opt/harness/mini_swe_agent.sh"


def _mini() -> Path:
    """The ``mini`` of the interpreter running the tests (mini-swe-agent 2.4.6, dev extra)."""
    try:  # not imported here: its import writes a config folder in the user's home
        version = importlib.metadata.version("mini-swe-agent")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("mini-swe-agent is not installed: pip install -e '.[dev]' installs it")
    assert version == "2.4.6", version
    found = Path(sys.executable).parent / "mini"
    found = found if found.exists() else Path(shutil.which("mini") or "")
    assert found.name == "mini" and os.access(found, os.X_OK), "mini-swe-agent's `mini` not found"
    return found


@pytest.fixture()
def backend():  # no_leaks's: mini-swe-agent runs each command in a session of its own
    return "local"


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory):
    """The wrapper, and ``bin/mini``: the host's entry point (the local sandbox binds the
    interpreter's prefix; a link keeps the test independent of the shell's PATH)."""
    d = tmp_path_factory.mktemp("mini-harness")
    shutil.copy(WRAPPER, d / "mini_swe_agent.sh")
    (d / "bin").mkdir()
    (d / "bin" / "mini").symlink_to(_mini())
    for p in (d, d / "bin", d / "mini_swe_agent.sh"):
        os.chmod(p, 0o755)
    return d


def mini_replies(patch: str) -> list[str]:
    """Two replies in mini-swe-agent's text format: apply ``patch``, then submit."""
    fence = "```mswea_bash_command\n{}\n```"
    return [
        "THOUGHT: I apply the fix.\n\n" + fence.format(f"git apply <<'EOF'\n{patch}EOF"),
        "THOUGHT: Done.\n\n" + fence.format("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]


def _observation(returncode: int, output: str) -> str:
    """mini-swe-agent's own observation text (mini_textbased.yaml's template)."""
    import yaml
    from jinja2 import StrictUndefined, Template

    (package,) = importlib.util.find_spec("minisweagent").submodule_search_locations
    config = yaml.safe_load((Path(package) / "config" / "mini_textbased.yaml").read_text())
    template = Template(config["model"]["observation_template"], undefined=StrictUndefined)
    output = {"returncode": returncode, "output": output, "exception_info": ""}
    return template.render(output=output)


def test_mini_swe_agent_cli_is_graded_and_token_exact(harness_dir, tokenizer, no_leaks):  # noqa: F811
    spec = _spec("local", COMMAND, harness_dir, timeout=300, max_turns=6)
    engine = ScriptedModel(mini_replies(TASK.patch), tokenizer=tokenizer, name="policy")
    (traj,) = run_cmd_rollouts(spec, engine, [TASK.instance_id], 1, 0)
    cmd = traj.agent["cmd"]
    assert traj.finish_reason == "submitted" and traj.reward == 1.0, (traj.error, cmd)
    assert traj.resolved and traj.patch.startswith("diff --git")
    assert cmd["end"] == "exited" and cmd["exit_code"] == 0 and not cmd["left"], cmd
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in cmd["stdout"], cmd["stdout"][-2000:]
    # Two turns in one segment: mini-swe-agent sent its history back unchanged.
    assert traj.token_exact and traj.num_turns == 2 and traj.agent["segment_starts"] == [0]
    template = ChatTemplate(tokenizer)
    # Its own prompts (mini_textbased.yaml), with the issue from $SWE_GYM_ISSUE.
    assert "exactly ONE bash code block" in traj.system_prompt
    assert traj.prompt.startswith("Please solve this issue: " + TASK.problem_statement.strip())
    messages = [
        {"role": "system", "content": traj.system_prompt},
        {"role": "user", "content": traj.prompt},
    ]
    first, second = traj.turns
    assert first.prompt_delta_ids == template.initial_ids(messages)
    # The second prompt adds exactly the first reply's end of turn (not sampled) and the
    # observation of `git apply` (exit 0, no output) as mini-swe-agent renders it.
    observation = {"role": "user", "content": _observation(0, "")}
    expected = template.turn_filler(first.completion_ids) + template.message_delta_ids(observation)
    assert second.prompt_delta_ids == expected
    assert tokenizer.decode(second.completion_ids).startswith("THOUGHT: Done.")
    assert "sk-episode" not in json.dumps(traj.to_dict())  # the key is not kept


@pytest.mark.slow
def test_grpo_trains_one_iteration_with_the_mini_swe_agent_cli(tmp_path: Path, harness_dir):
    """GRPO end to end with mini-swe-agent's CLI in local sandboxes and a scripted rollout
    model: two episodes graded, resolved, trained on and reported."""
    from algos import grpo
    from algos.loop.metrics import read_metrics
    from algos.report import load_run, write_report
    from tests.algos.test_grpo import COMMON

    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(mini_replies(TASK.patch)))
    run = tmp_path / "run"
    args = [
        *COMMON,
        *("--env", "SWEStarter-v0", "--tasks", TASK.instance_id),
        *("--rollout-model", f"scripted:{replies}", "--max-new-tokens", "2048"),
        *("--max-context-tokens", "16384", "--run-dir", str(run)),
        *("--agent-cmd", COMMAND, "--agent-mount", str(harness_dir)),
    ]
    assert grpo.main(args) == 0
    (row,) = read_metrics(run)
    assert row["episodes"] == 2 and row["resolved_rate"] == 1.0 and row["turns_mean"] == 2.0
    (it,) = load_run(run)["iterations"]
    assert all(t.agent["cmd"]["end"] == "exited" and t.token_exact for t in it["episodes"])
    assert f"agent command {COMMAND}: exited" in write_report(run).read_text()
