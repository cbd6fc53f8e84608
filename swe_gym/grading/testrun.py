"""Running a task's tests in a sandbox and reading their complete log.

The test command (the row's ``test_cmd``, else swebench's for the row's (repo, version), else
``pytest -rA``; ``test_command_choice`` says which) runs between the harness's output markers with its exit status
recorded, into a log file in the sandbox that is read back whole (up to ``LOG_LIMIT`` bytes;
past it the head and tail are kept), never through the agent's observation cap. The log is
parsed by the row's parser from ``swebench.harness.log_parsers`` (the row's, else swebench's
map for the repository; ``log_parser_choice`` says which) with the harness's own
validity checks (``get_logs_eval``). With a verdict ``Channel`` (``swe_gym.grading.verdict``) the run
loads the grader's pytest plugin, with plugin auto-loading off.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
from swebench.harness.grading import get_logs_eval
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from swe_gym.errors import FileTooLarge, unknown_choice
from swe_gym.grading.testinfra import WORK_DIR
from swe_gym.grading.verdict import Channel
from swe_gym.sandbox import Sandbox
from swe_gym.taskenv import specs
from swe_gym.tasks import Task

DEFAULT_TEST_TIMEOUT = 900.0
LOG_LIMIT = 64 * 2**20  # bytes of test log read back; past it the middle is cut
_LOG = f"{WORK_DIR}/test.log"

DEFAULT_TEST_CMD = "pytest -rA"
DEFAULT_PARSER = "parse_log_pytest"


def log_parser_choice(task: Task) -> tuple[str, str]:
    """(parser name, where it came from): the row's own ``install_config.log_parser`` (or a
    swebench 5 row's ``log_parser`` column), else the installed swebench's repository map
    (``MAP_REPO_TO_PARSER*``), else ``parse_log_pytest`` for a repository swebench does not
    know."""
    cfg = task.install_config or {}
    if cfg.get("log_parser"):
        name, source = cfg["log_parser"], "row install_config"
    elif task.extra.get("log_parser"):
        name, source = task.extra["log_parser"], "row log_parser"
    elif task.repo in specs.repo_parsers():
        name, source = specs.repo_parsers()[task.repo], "swebench repository map"
    else:
        name, source = DEFAULT_PARSER, f"default ({task.repo} unknown to swebench)"
    if name not in PARSER_REGISTRY:
        raise unknown_choice(f"log_parser for task {task.instance_id}:", name, PARSER_REGISTRY)
    return name, source


def log_parser_name(task: Task) -> str:
    return log_parser_choice(task)[0]


def _eval_script_command(script: str) -> str | None:
    """The test command of a swebench 5 row's ``eval_script`` (between the output markers)."""
    lines = script.splitlines()
    try:
        start = next(i for i, x in enumerate(lines) if START_TEST_OUTPUT in x)
        end = next(i for i, x in enumerate(lines) if END_TEST_OUTPUT in x and i > start)
    except StopIteration:
        return None
    body = [x for x in lines[start + 1 : end] if x.strip()]
    return " && ".join(body) or None


def test_command_choice(task: Task) -> tuple[str, str]:
    """(command, where it came from). The row's ``install_config.test_cmd``, else swebench's
    spec for (repo, version), then the test patch's files appended; else a swebench 5 row's
    ``eval_script`` command, taken whole (it names its files); else ``pytest -rA`` and the
    files."""
    cfg = task.install_config or {}
    base, source = cfg.get("test_cmd"), "row install_config"
    if not base and task.version:
        spec = specs.version_spec(task.repo, task.version) or {}
        base, source = spec.get("test_cmd"), f"swebench spec ({task.repo} {task.version})"
    if not base and task.extra.get("eval_script"):
        whole = _eval_script_command(str(task.extra["eval_script"]))
        if whole:
            return whole, "row eval_script"
    if not base:
        base, source = DEFAULT_TEST_CMD, "default (no test_cmd in the row or swebench)"
    if isinstance(base, list):  # some rows and specs store a list of commands
        base = " && ".join(base)
    files = [f for f in task.test_files if f.endswith(".py")] or task.test_files
    return f"{base} {' '.join(shlex.quote(f) for f in files)}".strip(), source


def test_command(task: Task) -> str:
    """The task's test command followed by the test files its test patch touches."""
    return test_command_choice(task)[0]


def env_prefix(task: Task) -> str:
    """Shell: export the row's ``env_vars`` (and, for a row without its own ``test_cmd``, the
    ``export`` lines of swebench's ``eval_commands`` for its (repo, version))."""
    env = (task.install_config or {}).get("env_vars") or {}
    out = "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in env.items())
    if not (task.install_config or {}).get("test_cmd") and task.version:
        spec = specs.version_spec(task.repo, task.version) or {}
        cmds = [c.strip() for c in spec.get("eval_commands") or []]
        out += "".join(f"{c}; " for c in cmds if c.startswith("export "))
    return out


@dataclass
class TestRun:
    status: dict[str, str]
    valid: bool  # False: the suite did not run (or its log contradicts its exit status)
    timed_out: bool
    exit_code: int | None
    log: str
    truncated: bool = False  # the log passed LOG_LIMIT and its middle was cut


def _cut_log(limit: int) -> str:
    """Shell: past ``limit`` bytes keep the log's head and tail, say the cut, print CUT."""
    half = limit // 2
    return (
        f'__s=$(stat -c %s {_LOG}) && if [ "$__s" -gt {limit} ]; then {{ head -c {half} {_LOG}; '
        f"printf '\\n<log truncated: %s bytes, middle cut>\\n' \"$__s\"; tail -c {half} {_LOG}; }} "
        f"> {_LOG}.cut && mv {_LOG}.cut {_LOG} && echo CUT; fi"
    )


def _read_log(sandbox: Sandbox, limit: int = LOG_LIMIT) -> str:
    """The log, read through the sandbox's file API with a cap: the shell's cut may not have
    happened (the tests' code ran as root in a Docker grading container and can replace
    ``head``); a log still over the cap reads as none (the suite did not run)."""
    try:
        return sandbox.read_file(_LOG, max_bytes=limit + 4096).decode("utf-8", "replace")
    except (FileNotFoundError, FileTooLarge):
        return ""


_PYTHONPATH_SET = re.compile(r"(?<![\w$])PYTHONPATH=((?:\"[^\"]*\"|'[^']*'|[^\s;&|)])*)")


def keep_channel_path(cmd: str) -> str:
    """A row's test command that sets ``PYTHONPATH`` (``PYTHONPATH=. pytest``) with the value
    the grader exported appended, so the grader's plugin still imports."""
    return _PYTHONPATH_SET.sub(lambda m: f'PYTHONPATH={m.group(1)}:"$PYTHONPATH"', cmd)


def run_tests(
    sandbox: Sandbox,
    task: Task,
    timeout: float = DEFAULT_TEST_TIMEOUT,
    log_limit: int = LOG_LIMIT,
    channel: Channel | None = None,
) -> TestRun:
    """Run the task's test command in ``sandbox`` (test patch already applied) and parse its
    complete log, written to a file in the sandbox (never through the output cap) and read
    back whole up to ``log_limit`` bytes (past it the head and tail, the cut said). With
    ``channel``, the grader's plugin records each test's outcome beside the log."""
    wd = shlex.quote(sandbox.workdir)
    exports = channel.exports if channel is not None else ""
    test_cmd = test_command(task) if channel is None else keep_channel_path(test_command(task))
    cmd = (
        f"cd {wd} && mkdir -p {WORK_DIR} && {{ {env_prefix(task)}{exports}"
        f"echo '{START_TEST_OUTPUT}'; {test_cmd}; __swe_rc=$?; "
        f"echo '{END_TEST_OUTPUT}'; echo '{TEST_EXIT_CODE}: '$__swe_rc; }} > {_LOG} 2>&1 < /dev/null; "
        f"cd {wd} && tail -n 1 {_LOG}; {_cut_log(log_limit)}"
    )
    res = sandbox.run(cmd, timeout=timeout)
    if res.timed_out:  # the command was killed before its cut: cut now
        cut = sandbox.run(f"cd {wd} && {_cut_log(log_limit)}", timeout=120)
        return TestRun({}, False, True, None, _read_log(sandbox, log_limit), "CUT" in cut.output)
    text, truncated = _read_log(sandbox, log_limit), "CUT" in res.output.splitlines()
    spec = TestSpec(
        instance_id=task.instance_id,
        image="",
        eval_script_list=[],
        repo=task.repo,
        version=task.version,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=log_parser_name(task),
    )
    # get_logs_eval reads a file: keep the harness's own checks rather than re-implementing them.
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        status, valid = get_logs_eval(spec, f.name)
    first = res.output.strip().splitlines()[0] if res.output.strip() else ""
    code = first.rpartition(": ")[2]
    return TestRun(status, valid, False, int(code) if code.isdigit() else None, text, truncated)
