"""Running a task's tests in a sandbox and reading their complete log.

The test command (the row's ``test_cmd``, else the SWE-bench harness's command for the
repository, else ``pytest -rA``) runs between the harness's output markers with its exit status
recorded, into a log file in the sandbox that is read back whole (up to ``LOG_LIMIT`` bytes;
past it the head and tail are kept), never through the agent's observation cap. The log is
parsed by the row's parser from ``swebench.harness.log_parsers`` with the harness's own
validity checks (``get_logs_eval``). With a verdict ``Channel`` (``swe_gym.verdict``) the run
loads the grader's pytest plugin, with plugin auto-loading off.
"""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
from swebench.harness.grading import get_logs_eval
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from swe_gym.errors import FileTooLarge, unknown_choice
from swe_gym.sandbox import Sandbox
from swe_gym.tasks import Task
from swe_gym.testinfra import WORK_DIR
from swe_gym.verdict import Channel

DEFAULT_TEST_TIMEOUT = 900.0
LOG_LIMIT = 64 * 2**20  # bytes of test log read back; past it the middle is cut
_LOG = f"{WORK_DIR}/test.log"

# SWE-bench rows carry no install spec (it lives in the harness by repo); these are the parsers
# and test commands the SWE-bench harness uses for the SWE-bench Verified repositories.
_SWEBENCH_REPO_PARSER = {
    "django/django": "parse_log_django",
    "sympy/sympy": "parse_log_sympy",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "astropy/astropy": "parse_log_astropy",
    "pydata/xarray": "parse_log_xarray",
    "scikit-learn/scikit-learn": "parse_log_scikit",
    "pylint-dev/pylint": "parse_log_pylint",
    "psf/requests": "parse_log_requests",
    "pallets/flask": "parse_log_flask",
}
_SWEBENCH_REPO_TEST_CMD = {
    "django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
    "sphinx-doc/sphinx": "tox --current-env -epy39 -v --",
}
DEFAULT_TEST_CMD = "pytest -rA"


def log_parser_name(task: Task) -> str:
    cfg = task.install_config or {}
    name = cfg.get("log_parser") or _SWEBENCH_REPO_PARSER.get(task.repo, "parse_log_pytest")
    if name not in PARSER_REGISTRY:
        raise unknown_choice(f"log_parser for task {task.instance_id}:", name, PARSER_REGISTRY)
    return name


def test_command(task: Task) -> str:
    """The task's test command followed by the test files its test patch touches."""
    cfg = task.install_config or {}
    base = cfg.get("test_cmd") or _SWEBENCH_REPO_TEST_CMD.get(task.repo, DEFAULT_TEST_CMD)
    if isinstance(base, list):  # some SWE-rebench rows store a list of commands
        base = " && ".join(base)
    files = [f for f in task.test_files if f.endswith(".py")] or task.test_files
    return f"{base} {' '.join(shlex.quote(f) for f in files)}".strip()


def env_prefix(task: Task) -> str:
    """Shell: export the row's ``env_vars``."""
    env = (task.install_config or {}).get("env_vars") or {}
    return "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in env.items())


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
    cmd = (
        f"cd {wd} && mkdir -p {WORK_DIR} && {{ {env_prefix(task)}{exports}"
        f"echo '{START_TEST_OUTPUT}'; {test_command(task)}; __swe_rc=$?; "
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
