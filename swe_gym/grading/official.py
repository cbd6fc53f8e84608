"""swebench's own verdict on a grading run's complete log, beside the project's.

``grade_logged`` grades a patch like ``grading.grade_patch`` and also reads the whole test log
back from the grading sandbox before it is closed; ``swebench_verdict`` then judges that log
with nothing of ours: ``get_logs_eval`` (the row's parser, the harness's validity checks),
``get_eval_tests_report`` and ``get_resolution_status``. ``python -m swe_gym.validate``
prints both, so a user sees on their own rows whether the project pays what swebench would.
"""

from __future__ import annotations

import tempfile
from typing import Any

from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, ResolvedStatus
from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
from swebench.types import TestSpec

from swe_gym.grading.grade import GradingReport, grade_in_sandbox
from swe_gym.grading.testinfra import WORK_DIR
from swe_gym.grading.testrun import LOG_LIMIT, log_parser_name
from swe_gym.sandbox import make_sandbox
from swe_gym.tasks import Task

_LOG = f"{WORK_DIR}/test.log"  # where swe_gym.grading.testrun writes it


def swebench_verdict(task: Task, log: str) -> bool | None:
    """swebench's resolution of ``log`` (None: no log)."""
    if not log:
        return None
    spec = TestSpec(
        instance_id=task.instance_id, image="", eval_script_list=[], repo=task.repo,
        version=task.version, FAIL_TO_PASS=task.FAIL_TO_PASS, PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=log_parser_name(task),
    )  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as f:
        f.write(log)
        f.flush()
        status, valid = get_logs_eval(spec, f.name)
    if not valid:
        return False
    gold = {FAIL_TO_PASS: task.FAIL_TO_PASS, PASS_TO_PASS: task.PASS_TO_PASS}
    return get_resolution_status(get_eval_tests_report(status, gold)) == ResolvedStatus.FULL.value


def grade_logged(
    task: Task, patch: str, backend: str, options: dict[str, Any], rule: str
) -> tuple[GradingReport, str]:
    """(the project's report, the complete test log) for ``patch`` in a fresh sandbox."""
    sandbox = make_sandbox(task, backend, **options)
    try:
        sandbox.start()
        report = grade_in_sandbox(sandbox, task, patch, rule=rule)
        try:
            log = sandbox.read_file(_LOG, max_bytes=LOG_LIMIT + 4096).decode("utf-8", "replace")
        except Exception:  # no log: the run never started (the report says why)
            log = ""
        return report, log
    finally:
        sandbox.close()


__all__ = ["grade_logged", "swebench_verdict"]
