"""Every starter task on the Docker backend, from images built on this machine: the gold patch
resolves, the empty patch does not."""

from __future__ import annotations

import pytest

from swe_gym.starter import starter_tasks

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("task", starter_tasks(), ids=lambda t: t.instance_id)
def test_gold_resolves_and_empty_fails_on_docker(task, docker_client, run_id, base_image):
    from swe_gym.grading import grade_patch

    opts = {"client": docker_client, "run_id": run_id}
    gold = grade_patch(task, task.patch, backend="docker", sandbox_options=opts)
    assert gold.resolved, (gold.reason, gold.f2p_failed, gold.p2p_failed)
    empty = grade_patch(task, "", backend="docker", sandbox_options=opts)
    assert not empty.resolved and empty.reason == "tests_failed", empty.reason
