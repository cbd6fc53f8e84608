"""Run the tests on clean code and on one mutant at a time in a sandbox; classify the result.

One sandbox per worker holds the clean source at HEAD. For each mutant the file is written,
the suite runs with its log redirected to a file in the working copy (command output is capped;
the file is read back whole), the log is parsed by the ``swebench`` pytest parser (the one
grading uses), and the working copy is reset. Bytecode writing is off: a mutant of the same size
written within the same second as the original would otherwise be shadowed by a stale ``.pyc``.
A wide ``COLUMNS`` keeps pytest from cutting the summary's error messages (the issue quotes them).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from swebench.harness.log_parsers import PARSER_REGISTRY

from swe_gym.sandbox import Sandbox, make_sandbox
from swe_gym.tasks import Task

LOG_FILE = ".swe_gym_synth.log"
PASSING = ("PASSED", "XFAIL")
LOG_PARSER = "parse_log_pytest"

# Why a candidate is dropped; the summary counts each.
DROP_REASONS = (
    "timeout",
    "collection_error",
    "suite_did_not_run",
    "tests_missing",
    "no_fail_to_pass",
    "hackable",  # the audit's exploits pass the tests (pipeline.audit_candidate)
)


@dataclass
class SuiteRun:
    status: dict[str, str]
    exit_code: int | None
    timed_out: bool
    log: str
    duration: float

    @property
    def passed(self) -> set[str]:
        return {t for t, s in self.status.items() if s in PASSING}


@dataclass
class Outcome:
    """Verdict on one mutant: ``reason`` is None exactly when it was accepted."""

    reason: str | None
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    log: str = ""
    duration: float = 0.0


def clean_task(repo: str, commit: str, test_cmd: str) -> Task:
    """A task row for the clean HEAD: what the validation sandbox checks out."""
    return Task(
        instance_id=f"{repo.replace('/', '__')}-clean",
        repo=repo,
        base_commit=commit,
        problem_statement="",
        patch="",
        test_patch="",
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        install_config={"test_cmd": test_cmd, "log_parser": LOG_PARSER},
    )


def parse_log(log: str) -> dict[str, str]:
    return PARSER_REGISTRY[LOG_PARSER](log, None)


def _collection_broke(run: SuiteRun) -> bool:
    # pytest exits 2 when collection errors interrupt the session, 3 on an internal error.
    return (
        run.exit_code in (2, 3, 4)
        or "error during collection" in run.log
        or "errors during collection" in run.log
    )


class Validator:
    """A started sandbox at the clean commit that runs the suite on mutants, one at a time."""

    def __init__(
        self, task: Task, *, backend: str = "local", sandbox_options: dict[str, Any] | None = None
    ):
        self.task = task
        self.test_cmd = (task.install_config or {}).get("test_cmd", "pytest -rA")
        self.sandbox: Sandbox = make_sandbox(task, backend, **(sandbox_options or {}))
        self.sandbox.start()

    def close(self) -> None:
        self.sandbox.close()

    def run_suite(self, timeout: float) -> SuiteRun:
        wd = shlex.quote(self.sandbox.workdir)
        cmd = (
            f"cd {wd} && export PYTHONDONTWRITEBYTECODE=1 COLUMNS=240; "
            f"{self.test_cmd} -p no:cacheprovider > {LOG_FILE} 2>&1; echo __rc=$?"
        )
        res = self.sandbox.run(cmd, timeout=timeout)
        try:
            log = self.sandbox.read_file(LOG_FILE).decode("utf-8", "replace")
        except FileNotFoundError:
            log = ""
        rc = None
        if not res.timed_out and "__rc=" in res.output:
            tail = res.output.rsplit("__rc=", 1)[1].split()
            rc = int(tail[0]) if tail and tail[0].lstrip("-").isdigit() else None
        self.reset()
        return SuiteRun(parse_log(log), rc, res.timed_out, log, res.duration)

    def reset(self) -> None:
        wd = shlex.quote(self.sandbox.workdir)
        res = self.sandbox.run(f"cd {wd} && git checkout -q -- . && git clean -fdq", timeout=120)
        if res.exit_code != 0:
            raise RuntimeError(f"could not reset the validation sandbox: {res.output[-2000:]}")

    def check(self, path: str, mutant: str, baseline: set[str], timeout: float) -> Outcome:
        """Run the suite with ``path`` replaced by ``mutant``; F2P/P2P against ``baseline``."""
        self.sandbox.write_file(path, mutant)
        run = self.run_suite(timeout)
        if run.timed_out:
            return Outcome("timeout", log=run.log, duration=run.duration)
        if _collection_broke(run):
            return Outcome("collection_error", log=run.log, duration=run.duration)
        if not run.status:
            return Outcome("suite_did_not_run", log=run.log, duration=run.duration)
        if any(t not in run.status for t in baseline):
            return Outcome("tests_missing", log=run.log, duration=run.duration)
        f2p = sorted(t for t in baseline if run.status[t] not in PASSING)
        p2p = sorted(t for t in baseline if run.status[t] in PASSING)
        if not f2p:
            return Outcome("no_fail_to_pass", log=run.log, duration=run.duration)
        return Outcome(None, f2p, p2p, run.log, run.duration)


def baseline(validator: Validator, timeout: float, runs: int = 2) -> tuple[set[str], float]:
    """Tests passing on clean code in every one of ``runs`` runs (flaky ones are left out),
    and the slowest run's duration. Raises when the suite does not run on clean code."""
    passed: set[str] | None = None
    slowest = 0.0
    for _ in range(runs):
        run = validator.run_suite(timeout)
        if run.timed_out:
            raise RuntimeError(
                f"the test suite timed out after {timeout:g} s on the clean code; pass a larger --timeout"
            )
        if not run.passed:
            raise RuntimeError(
                f"no test passed on the clean code with `{validator.test_cmd}` (exit code {run.exit_code}); "
                f"the log ends:\n{run.log[-3000:]}"
            )
        passed = run.passed if passed is None else passed & run.passed
        slowest = max(slowest, run.duration)
    assert passed is not None
    return passed, slowest


__all__ = [
    "DROP_REASONS",
    "LOG_FILE",
    "Outcome",
    "SuiteRun",
    "Validator",
    "baseline",
    "clean_task",
    "parse_log",
]
