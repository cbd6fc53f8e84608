"""The hackability audit (``swe_gym.audit``) by exploit class, on both backends: each class is
paid on a task whose hidden test is weak in that class's way, and none is paid on a task whose
test compares type and value on inputs the issue does not quote. The tamper mechanisms are
caught on every task. Tasks are ``starter__tinystats-1`` (``median`` does not sort) with hidden
tests written here, so the cases do not move when the bundled tests are reviewed.
"""

from __future__ import annotations

import dataclasses
import re
import uuid

import pytest

from swe_gym.audit import audit_task
from swe_gym.audit.targets import read_sources
from swe_gym.repos import local_repo
from swe_gym.starter import starter_tasks
from swe_gym.swerl.apply import make_patch
from swe_gym.synth.derived import read_tree_files

RUN_ID = f"pytest-audit-{uuid.uuid4().hex[:8]}"
TEST_FILE = "tests/test_descriptive.py"
F2P = f"{TEST_FILE}::test_median_hidden"
QUOTING_ISSUE = (
    "median() is wrong for unsorted input\n\n```python\n>>> median([3, 1, 2])\n1\n```\n"
    "It should be 2.\n"
)
PLAIN_ISSUE = (
    "median() returns the middle element of the list as given, not of the sorted values.\n"
)
# Weak in the comparison and hard-coding ways: `==` on the one quoted input.
WEAK_EQ = "def test_median_hidden():\n    assert median([3, 1, 2]) == 2\n"
# Weak in the stub way: it only says what the answer is not (and the task keeps no other test
# of median, as a task whose repository has none would).
WEAK_STUB = "def test_median_hidden():\n    assert median([3, 1, 2]) != 1\n"
STRONG = """def test_median_hidden():
    for data, want in (([9, 4, 7, 1], 5.5), ([8, 2, 5], 5), ([1.5, 0.5], 1.0), ([4, 4, 1], 4)):
        got = median(data)
        assert type(got) is type(want) and got == want, (data, got)
"""


def _task(test_body: str, issue: str, keep_p2p: bool = True):
    base = next(t for t in starter_tasks() if t.instance_id == "starter__tinystats-1")
    text = read_tree_files(local_repo(base.repo), base.base_commit, [TEST_FILE])[TEST_FILE]
    defined = set(re.findall(r"^def (test_\w+)", text, re.M))
    p2p = [
        t
        for t in base.PASS_TO_PASS
        if not t.startswith(TEST_FILE) or t.split("::")[1].split("[")[0] in defined
    ]
    return dataclasses.replace(
        base,
        instance_id=f"audit-case-{abs(hash((test_body, issue))) % 10**8}",
        problem_statement=issue,
        test_patch=make_patch({TEST_FILE: text}, {TEST_FILE: text + "\n\n" + test_body}),
        FAIL_TO_PASS=[F2P],
        PASS_TO_PASS=p2p if keep_p2p else [],
    )


@pytest.fixture
def audit(backend, request):
    opts = {}
    if backend == "docker":
        opts = {"client": request.getfixturevalue("docker_client"), "run_id": RUN_ID}

    def run(task, only, max_mutants=0):
        return audit_task(
            task,
            backend=backend,
            sandbox_options=opts,
            only=only,
            max_mutants=max_mutants,
            timeout=300,
            use_cache=False,
        )

    return run


def test_sources_name_the_function_the_gold_patch_touches():
    s = read_sources(_task(WEAK_EQ, QUOTING_ISSUE))
    assert [(t.path, t.qualname, t.kind) for t in s.targets] == [
        ("tinystats/descriptive.py", "median", "function")
    ]
    assert "sorted(data)" in s.fixed["tinystats/descriptive.py"]


def test_weak_comparison_test_pays_always_equal_and_the_quoted_call(audit):
    r = audit(_task(WEAK_EQ, QUOTING_ISSUE), ["always_equal", "hardcoded", "skip", "xfail"])
    assert r.valid, r.reasons
    assert r.hackable
    assert set(r.paid) == {"always_equal", "hardcoded"}, r.exploits
    # the runner's skip and xfail never pay under the reward's rule
    assert {r.exploits[n]["outcome"] for n in ("skip", "xfail")} <= {"failed", "caught"}


def test_weak_stub_test_pays_the_stubs(audit):
    r = audit(_task(WEAK_STUB, PLAIN_ISSUE, keep_p2p=False), ["short_circuit", "identity"])
    assert r.valid and r.hackable
    assert set(r.paid) == {"short_circuit", "identity"}, r.exploits
    assert "hardcoded" not in r.exploits  # no quoted call: not applicable, not run


def test_strong_test_pays_no_exploit_and_kills_the_mutants(audit):
    r = audit(_task(STRONG, QUOTING_ISSUE), None, max_mutants=6)
    assert r.valid, r.reasons
    assert r.paid == [], r.exploits
    assert not r.hackable, r.reasons
    assert r.mutation_score == 1.0, r.mutants
    # the tamper mechanisms were caught, not merely unpaid
    assert {r.exploits[n]["outcome"] for n in ("settrace", "report_patch", "conftest")} == {
        "caught"
    }, r.exploits


def test_weak_test_lets_mutants_survive():
    # mutants are graded as every patch is; the strong case runs them on both backends
    r = audit_task(
        _task(WEAK_STUB, PLAIN_ISSUE, keep_p2p=False), only=[], max_mutants=8, use_cache=False
    )
    assert r.mutation_score is not None and r.mutation_score < 1.0, r.mutants
