"""``SWEEnv``: a multi-turn software-engineering episode as a ``gymnasium.Env``.

An episode: ``reset`` picks a task (``options={"task_id": ...}``, else a draw from the env's
generator, which ``reset(seed=...)`` seeds) and starts a sandbox with the repository at
``base_commit``; the observation is the task prompt, and ``info["system_prompt"]`` holds the tool
docs and action format. Each ``step(text)`` parses the model's raw text into one tool call
(``bash``, ``str_replace_editor``, ``submit``), runs it and returns its output, followed by a
footer ``(Open file: <last file the editor showed or changed, or n/a>)`` and
``(Current directory: <the shell's cwd>)``. ``submit`` grades the diff in a fresh sandbox
(SWE-bench rule, see ``swe_gym.grading``) and terminates with reward 1.0 if resolved else 0.0.
Reaching ``max_turns`` truncates the episode (and grades the current diff unless
``grade_on_truncation=False``).

``step`` never raises for what the agent sent. A malformed action is an observation:
``info["invalid_action"]`` is True and ``info["invalid_reason"]`` holds a reason code from
``swe_gym.tools.parsing``. A tool failure (a file the editor cannot open, a symlink out of the
repository) is an ``ERROR: ...`` observation (``info["tool_error"]`` set when it was not the
editor's own message). Every end sets ``info["end_reason"]`` (None while the episode runs):

- ``submitted``: graded after ``submit`` (terminated);
- ``max_turns``: the turn limit (truncated; graded unless ``grade_on_truncation=False``);
- ``sandbox_failed``: the sandbox died (container killed, session closed) or the diff could not
  be taken (truncated, reward 0, ``info["error"]`` says why). A shell the agent killed is not
  this: the sandbox starts a new shell and says so in the observation;
- ``grading_error``: the grader could not give a verdict (truncated, reward 0, ``info["error"]``).

A working copy whose diff passes the sandbox's bounds (``max_patch_bytes``, ``max_tree_bytes``,
``diff_timeout``) is graded as not resolved with that reason (``patch_too_large``,
``workspace_too_large``, ``diff_timed_out``): the agent's doing, not the env's failure.

``suspect_policy``: what a patch earns that ``swe_gym.grading.forgery`` flags (``report["suspect"]``):
``"zero"`` (default) pays nothing, ``"grade"`` pays the tests' verdict.

``task_filter``: which tasks the env serves, by the hackability audit (``swe_gym.audit``):
``"unhackable"``, ``"hackable"`` or a callable ``Task -> bool``; ``audit`` names the audit file
(default: the one beside the rows, or the bundled suite's own).

Stepping after the end, or before ``reset``, raises ``ResetNeeded``. ``fork(n)`` copies a
running episode into n at the same step (``envs.fork``).

``sandbox_options`` go to the agent's sandbox (``swe_gym.sandbox.make_sandbox``);
``grading_sandbox_options`` to the grading sandbox (default: the same options), e.g. a larger
memory limit or another image for the test run only.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded

from envs.fork import fork_swe_env, new_episode_id
from envs.selection import select_task
from envs.spaces import UnicodeText
from swe_gym.audit.select import TaskFilter, filter_tasks
from swe_gym.errors import DiffError, SandboxError, unknown_choice
from swe_gym.grading import DEFAULT_TEST_TIMEOUT, GradingReport, grade_patch
from swe_gym.sandbox import BACKENDS, DEFAULT_COMMAND_TIMEOUT, Sandbox, make_sandbox
from swe_gym.tasks import Task, TaskSource, load_tasks
from swe_gym.tools.docs import system_prompt, task_prompt
from swe_gym.tools.editor import Editor
from swe_gym.tools.parsing import ACTION_FORMATS, InvalidAction, ToolCall, parse_action

MAX_TEXT = 1_000_000  # characters; bounds of the Text spaces


def _interactive_message(command: str) -> str | None:
    from swe_gym.sandbox.interactive import interactive_command_message

    return interactive_command_message(command)


def _bounded(obs: str) -> str:
    """An observation every consumer can take: within the space's length and encodable as
    UTF-8 (a lone surrogate, e.g. from an agent's JSON escape quoted back, becomes U+FFFD)."""
    if len(obs) > MAX_TEXT:
        note = "\n<observation clipped>"
        obs = obs[: MAX_TEXT - len(note)] + note
    try:
        obs.encode("utf-8")
    except UnicodeEncodeError:
        obs = obs.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return obs


SUSPECT_POLICIES = ("zero", "grade")
DIFF_BOUNDS = ("patch_too_large", "workspace_too_large", "diff_timed_out")


class SWEEnv(gym.Env[str, str]):
    """Multi-turn SWE environment. See the module docstring for the episode contract."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        tasks: TaskSource = "starter",
        *,
        split: str = "test",
        instance_ids: list[str] | None = None,
        backend: str = "local",
        max_turns: int = 40,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        action_format: str = "fenced",
        grade_on_truncation: bool = True,
        test_timeout: float = DEFAULT_TEST_TIMEOUT,
        sandbox_options: dict[str, Any] | None = None,
        grading_sandbox_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
        suspect_policy: str = "zero",
        task_filter: TaskFilter | None = None,
        audit: str | None = None,
    ):
        if backend not in BACKENDS:
            raise unknown_choice("backend", backend, BACKENDS)
        if action_format not in ACTION_FORMATS:
            raise unknown_choice("action_format", action_format, ACTION_FORMATS)
        if suspect_policy not in SUSPECT_POLICIES:
            raise unknown_choice("suspect_policy", suspect_policy, SUSPECT_POLICIES)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise unknown_choice("render_mode", render_mode, self.metadata["render_modes"])
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if command_timeout <= 0:
            raise ValueError(f"command_timeout must be > 0 seconds, got {command_timeout!r}")
        self.tasks: list[Task] = load_tasks(tasks, split=split, instance_ids=instance_ids)
        if not self.tasks:
            raise ValueError(f"the task source {tasks!r} holds no tasks")
        if task_filter is not None:
            n = len(self.tasks)
            self.tasks = filter_tasks(self.tasks, task_filter, tasks, audit)
            if not self.tasks:
                raise ValueError(f"task_filter={task_filter!r} keeps none of the {n} tasks")
        self._by_id = {t.instance_id: t for t in self.tasks}
        self.backend = backend
        self.max_turns = max_turns
        self.command_timeout = float(command_timeout)
        self.action_format = action_format
        self.grade_on_truncation = grade_on_truncation
        self.test_timeout = test_timeout
        self.sandbox_options = dict(sandbox_options or {})
        self.grading_sandbox_options = (
            self.sandbox_options
            if grading_sandbox_options is None
            else dict(grading_sandbox_options)
        )
        self.render_mode = render_mode
        self.suspect_policy = suspect_policy
        self.observation_space = UnicodeText(MAX_TEXT)
        self.action_space = UnicodeText(MAX_TEXT)
        self.system_prompt = system_prompt(action_format, self.command_timeout)

        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.editor: Editor | None = None
        self.turn = 0
        self._done = True
        self._cwd = ""
        self._open_file: str | None = None
        self._last_obs = ""
        self._last_patch: str | None = None
        self.episode_id: str | None = None  # set by reset; parent and branch turn by fork
        self.parent_episode_id: str | None = None
        self.branch_turn: int | None = None

    # ------------------------------------------------------------------------- episode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._close_sandbox()
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; accepted: task_id")
        self.task = select_task(self.tasks, self._by_id, self.np_random, task_id)
        sandbox = make_sandbox(
            self.task, self.backend, command_timeout=self.command_timeout, **self.sandbox_options
        )
        try:
            sandbox.start()
        except BaseException:
            sandbox.close()
            raise
        self.sandbox, self.editor = sandbox, Editor(sandbox)
        self.turn, self._done = 0, False
        self.episode_id, self.parent_episode_id, self.branch_turn = new_episode_id(), None, None
        self._cwd, self._open_file = sandbox.workdir, None
        obs = _bounded(task_prompt(self.task.problem_statement, sandbox.workdir, self.max_turns))
        self._last_obs = obs
        info = self._info(tool=None)
        info["system_prompt"] = self.system_prompt
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done or self.sandbox is None:
            raise ResetNeeded(
                "call reset() before step(): the episode is over or was never started"
            )
        self.turn += 1
        text = action if isinstance(action, str) else str(action)
        parsed = parse_action(text, self.action_format)
        reward, terminated, truncated = 0.0, False, False
        self._last_patch = None  # set by _grade once it took the diff
        report: GradingReport | None = None
        end: dict[str, Any] = {}  # end_reason and error, once the episode ends
        if isinstance(parsed, InvalidAction):
            obs = f"Invalid action ({parsed.reason}): {parsed.message}"
            info = self._info(tool=None, invalid=parsed)
        else:
            info = self._info(tool=parsed.tool)
            if parsed.tool == "submit":
                report, end = self._grade()
                if end or report is None:  # no verdict: a truncated end, not a reward of 0
                    truncated = True
                    obs = f"Submitted, but the submission could not be graded: {end['error']}"
                else:
                    reward, terminated = self._reward(report), True
                    end = {"end_reason": "submitted"}
                    obs = "Submitted. " + (
                        "The tests pass: resolved."
                        if report.resolved
                        else f"Not resolved ({report.reason})."
                    )
                    if report.reason in DIFF_BOUNDS:
                        obs += f" {report.detail}"
            else:
                obs, end = self._tool_step(parsed, info)
                truncated = bool(end)
        if not (terminated or truncated) and self.turn >= self.max_turns:
            truncated = True
            obs += f"\n\nTurn limit ({self.max_turns}) reached; the episode is over."
            end = {"end_reason": "max_turns"}
            if self.grade_on_truncation:
                report, failed = self._grade()
                end = failed or end
                reward = self._reward(report) if report and not failed else 0.0
        if terminated or truncated:
            self._done = True
            info["patch"] = self._last_patch if self._last_patch is not None else self._safe_diff()
            self._close_sandbox()
        info["report"] = report.to_dict() if report else None
        info["resolved"] = bool(report and report.resolved)
        info.update(end)
        obs = _bounded(obs)
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------------- tools

    def _tool_step(self, call: ToolCall, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Run one tool call: ``(observation, end)``, ``end`` empty unless the sandbox died.

        Whatever the agent's call provokes is an observation: the editor turns file errors into
        ``ERROR:`` results; a ``SandboxError`` is an observation too while the sandbox still
        answers, and ends the episode (``end_reason="sandbox_failed"``) when it does not."""
        try:
            return self._run_tool(call), {}
        except SandboxError as e:
            if self._sandbox_alive():
                info["tool_error"] = f"SandboxError: {e}"
                return f"ERROR: {e}" + self._prompt_line(), {}
            return (
                f"The sandbox failed and the episode cannot go on: {e}",
                {"end_reason": "sandbox_failed", "error": str(e)},
            )
        except Exception as e:  # noqa: BLE001 - step never raises for what the agent sent
            info["tool_error"] = f"{type(e).__name__}: {e}"
            return (
                f"ERROR: the {call.tool} call failed: {type(e).__name__}: {e}"
                + self._prompt_line(),
                {},
            )

    def _sandbox_alive(self) -> bool:
        try:
            return self.sandbox is not None and self.sandbox.run("true", timeout=10).exit_code == 0
        except Exception:  # noqa: BLE001 - any failure to answer means dead
            return False

    def _run_tool(self, call: ToolCall) -> str:
        assert self.sandbox is not None and self.editor is not None
        if call.tool == "bash":
            command = call.args["command"]
            message = _interactive_message(command)
            if message:
                return message + self._prompt_line()
            res = self.sandbox.run(command, timeout=self.command_timeout)
            out = res.output if res.output.strip() else "(no output)"
            if res.restarted:
                out += "\n[the shell exited or was killed; a new shell was started: cwd and variables were reset]"
            if res.timed_out:
                out += f"\n[command timed out after {self.command_timeout:g} s and was killed]"
            elif res.oom_killed:
                out += "\n[command was killed: out of memory]"
            elif res.exit_code not in (0, None):
                out += f"\n[exit code {res.exit_code}]"
            self._cwd = self._current_dir()
            return out + self._prompt_line()
        out = self.editor(call.args)
        if call.args.get("command") in (
            "view",
            "create",
            "str_replace",
            "insert",
        ) and not out.startswith("ERROR"):
            self._open_file = call.args["path"]
        return out + self._prompt_line()

    def _current_dir(self) -> str:
        assert self.sandbox is not None
        res = self.sandbox.run("pwd", timeout=10)
        lines = res.output.strip().splitlines()
        return lines[-1] if res.exit_code == 0 and lines else self._cwd

    def _prompt_line(self) -> str:
        open_file = self._open_file or "n/a"
        return f"\n(Open file: {open_file})\n(Current directory: {self._cwd})"

    def _safe_diff(self) -> str:
        try:
            return self.sandbox.diff() if self.sandbox else ""
        except Exception:  # noqa: BLE001 - the episode is ending; an empty patch says it
            return ""

    def _grade(self) -> tuple[GradingReport | None, dict[str, Any]]:
        """``(report, end)``: ``end`` is empty when there is a verdict, else it holds
        ``end_reason`` (``sandbox_failed``: no diff; ``grading_error``: no verdict) and ``error``."""
        assert self.sandbox is not None and self.task is not None
        try:
            self._last_patch = self.sandbox.diff()
        except DiffError as e:  # a bound the agent's working copy passed: its doing, a verdict
            self._last_patch = ""
            report = GradingReport(self.task.instance_id, False, e.end_reason, detail=str(e))
            return report, {}
        except Exception as e:  # noqa: BLE001
            self._last_patch = ""  # nothing to report, nor to try again
            return None, {
                "end_reason": "sandbox_failed",
                "error": f"the diff failed: {type(e).__name__}: {e}",
            }
        try:
            report = grade_patch(
                self.task,
                self._last_patch,
                backend=self.backend,
                sandbox_options=self.grading_sandbox_options,
                timeout=self.test_timeout,
            )
        except Exception as e:  # noqa: BLE001 - grade_patch reports errors; defend anyway
            return None, {"end_reason": "grading_error", "error": f"{type(e).__name__}: {e}"}
        if report.reason == "grading_error":
            return report, {
                "end_reason": "grading_error",
                "error": report.detail or "grading error",
            }
        return report, {}

    def _reward(self, report: GradingReport) -> float:
        """1.0 for a resolved report, unless it is suspect and the policy says 0."""
        if report.suspect and self.suspect_policy == "zero":
            return 0.0
        return float(report.resolved)

    def _info(self, tool: str | None, invalid: InvalidAction | None = None) -> dict[str, Any]:
        return {
            "task_id": self.task.instance_id if self.task else None,
            "turn": self.turn,
            "invalid_action": invalid is not None,
            "invalid_reason": invalid.reason if invalid else None,
            "tool": tool,
            "patch": "",
            "end_reason": None,
            "parent_episode_id": self.parent_episode_id,  # a fork's; own id: self.episode_id
            "branch_turn": self.branch_turn,
        }

    # ------------------------------------------------------------------------- lifecycle

    def fork(self, n: int) -> list[SWEEnv]:
        """``n`` envs at this step, each on its own copy of the sandbox (``envs.fork``)."""
        return fork_swe_env(self, n)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def _close_sandbox(self) -> None:
        sandbox, self.sandbox, self.editor = self.sandbox, None, None
        if sandbox is not None:
            try:
                sandbox.close()
            except Exception:  # noqa: BLE001 - a dead sandbox may fail to close; it is dropped
                pass

    def close(self) -> None:
        self._done = True
        self._close_sandbox()
