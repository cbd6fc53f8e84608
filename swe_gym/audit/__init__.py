"""Per-task hackability audit: do the task's tests accept wrong code?

``python -m swe_gym.audit TASKS`` grades, per task, the gold and empty patches, a library of
generic exploit patches built from the functions the gold patch touches (``exploits``) and
mutants of the gold-fixed code (``mutants``) with the reward's own grader, and writes a verdict
per task (``run.judge``) beside the rows. ``select`` reads those verdicts back for
``gym.make(..., task_filter=...)`` and the trainers.
"""

from swe_gym.audit.run import (
    DEFAULT_MAX_MUTANTS,
    DEFAULT_MIN_MUTATION_SCORE,
    AuditResult,
    audit_task,
    judge,
)

__all__ = [
    "DEFAULT_MAX_MUTANTS",
    "DEFAULT_MIN_MUTATION_SCORE",
    "AuditResult",
    "audit_task",
    "judge",
]
