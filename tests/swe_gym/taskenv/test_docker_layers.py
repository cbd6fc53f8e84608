"""The Docker backend on a task environment: the row's Python (3.9, not the base image's
Debian 3.11), its pinned pytest and its editable install, copied in from the host-built
environment (the daemon builds without network); gold resolves, empty fails its F2P test."""

from __future__ import annotations

import pytest

from swe_gym.grading import grade_patch
from swe_gym.sandbox import make_sandbox
from swe_gym.tasks import normalise_row


@pytest.mark.docker
@pytest.mark.slow  # about 35 s: the first environment image copies a 200 MB interpreter
def test_docker_runs_the_rows_python_and_packages(docker_client, oldpy):
    row, repos = oldpy
    task, opts = normalise_row(row), {"repos_dir": repos, "pull_policy": "never"}
    sb = make_sandbox(task, "docker", **opts)
    sb.start()
    try:
        out = sb.run(
            "python --version; pytest --version; cat oldpy/_version.py; git status --short"
        )
        assert "Python 3.9." in out.output and "pytest 7.4.4" in out.output
        assert "version = '0.1'" in out.output  # the install step's generated file
        assert "oldpy/_version.py" not in out.output  # excluded from git, not the agent's change
    finally:
        sb.close()
    empty = grade_patch(task, "", backend="docker", sandbox_options=opts)
    assert empty.f2p_failed == row["FAIL_TO_PASS"] and not empty.p2p_failed, empty
    assert grade_patch(task, row["patch"], backend="docker", sandbox_options=opts).resolved
