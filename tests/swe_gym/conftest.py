"""Grading fixtures over the shared ``mini_repo`` (``tests/conftest.py``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="session")
def mini(mini_repo) -> tuple[dict, dict]:
    """(row, sandbox options); the host's pytest plugins are off (seconds per run, no part here)."""
    row, repos = mini_repo
    cfg = {**row["install_config"], "env_vars": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}
    return {**row, "install_config": cfg}, {"repos_dir": str(repos)}


@pytest.fixture
def run_tests_local(mini) -> Callable[..., Any]:
    """``run_tests(task, timeout=120, **kw)`` in a fresh local sandbox of the mini repository,
    closed after; returns the ``TestRun``."""
    from swe_gym.grading import run_tests
    from swe_gym.sandbox import make_sandbox

    def run(task: Any, timeout: float = 120, **kw: Any) -> Any:
        sb = make_sandbox(task, "local", **mini[1])
        sb.start()
        try:
            return run_tests(sb, task, timeout, **kw)
        finally:
            sb.close()

    return run


@pytest.fixture(scope="session")
def code_patch(mini_repo) -> Callable[[str], str]:
    """``code_patch(text)``: the diff turning ``calc.py`` at the base commit into ``text``."""
    repo = mini_repo[1] / "local__mini"

    def patch(text: str) -> str:
        (repo / "calc.py").write_text(text)
        out = subprocess.run(
            ["git", "diff", "--", "calc.py"], cwd=repo, capture_output=True, text=True, check=True
        )
        subprocess.run(["git", "checkout", "--", "calc.py"], cwd=repo, check=True)
        return out.stdout

    return patch
