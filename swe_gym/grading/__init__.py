"""Grading: a patch, a fresh sandbox, the task's tests, a verdict the patch cannot forge.

One module per concern (``grade`` is the flow; see its doc):

- ``patches``: applying the model and test patches, refusing unsafe paths;
- ``testinfra``: the test-infrastructure rule (what the patch may not change);
- ``testrun``: the test command, its complete log, the row's parser;
- ``verdict`` and ``verdict_plugin``: the signed result channel beside the log;
- ``guard``, ``guard_events``, ``guard_checks`` and ``guard_io``: the runtime guard the plugin
  installs first (audit hook, event handlers, integrity checks, files and records);
- ``forgery``: the static second line (the patch's files as they will run);
- ``official``: swebench's own rule on the same log.

The public API is re-exported here: ``from swe_gym.grading import grade_patch`` as before.
"""

from swe_gym.grading.grade import (
    RULES,
    GradingReport,
    grade_in_sandbox,
    grade_patch,
    restore_test_files,
)
from swe_gym.grading.patches import apply_patch, patch_paths
from swe_gym.grading.testrun import (
    DEFAULT_TEST_CMD,
    DEFAULT_TEST_TIMEOUT,
    LOG_LIMIT,
    TestRun,
    log_parser_name,
    run_tests,
    test_command,
)

__all__ = [
    "DEFAULT_TEST_CMD",
    "DEFAULT_TEST_TIMEOUT",
    "LOG_LIMIT",
    "RULES",
    "GradingReport",
    "TestRun",
    "apply_patch",
    "grade_in_sandbox",
    "grade_patch",
    "log_parser_name",
    "patch_paths",
    "restore_test_files",
    "run_tests",
    "test_command",
]
