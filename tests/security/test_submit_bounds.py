"""Red team for ``submit``: what the agent leaves in its sandbox cannot bend, hang or blow up the
diff that crosses over to grading.

Through ``env.step`` on ``starter__tinystats-2``, both backends where the class applies: binaries
on the diff path replaced (Docker: the agent is root; a ``git`` that appends a ``.git`` hunk and
sleeps), a working copy past the size bounds (a clear reason, quickly, host memory bounded),
files with non-UTF-8 names and contents beside a real fix (graded 1.0, the patch kept as bytes).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import gymnasium as gym
import pytest

import swe_gym  # noqa: F401  (registers the ids)
from swe_gym.sandbox.treediff import DIFF_TIMEOUT

RUN_ID = f"pytest-submit-bounds-{uuid.uuid4().hex[:8]}"
TASK = "starter__tinystats-2"
SUBMIT = "```\nsubmit\n```"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.fixture
def make_env(backend, request):
    made = []

    def make(**sandbox_options):
        if backend == "docker":
            sandbox_options.update(client=request.getfixturevalue("docker_client"), run_id=RUN_ID)
        env = gym.make(
            "SWEStarter-v0",
            backend=backend,
            instance_ids=[TASK],
            max_turns=10,
            sandbox_options=sandbox_options,
            grading_sandbox_options={k: v for k, v in sandbox_options.items() if "max_" not in k},
        )
        made.append(env)
        env.reset(seed=0)
        return env

    yield make
    for env in made:
        env.close()


def _fix(env) -> None:
    sb, task = env.unwrapped.sandbox, env.unwrapped.task
    sb.write_file(".gold.diff", task.patch)
    res = sb.run("git apply .gold.diff && rm .gold.diff", timeout=60)
    assert res.exit_code == 0, res.output


# The agent's git: a .git/config hunk appended to every diff, and a hang on `diff --cached`.
GIT_WRAPPER = r"""#!/bin/sh
case "$*" in *"diff --cached"*) sleep 100000;; esac
/usr/bin/git.real "$@"; rc=$?
case "$*" in *diff*) printf '%s\n' 'diff --git "a/\056git/config" "b/\056git/config"' \
  '--- "a/\056git/config"' '+++ "b/\056git/config"' '@@ -1 +1,2 @@' ' [core]' \
  '+	fsmonitor = touch /tmp/pwned';; esac
exit $rc
"""


@pytest.mark.docker
def test_the_agents_binaries_are_not_on_the_diff_path(docker_client):
    env = gym.make(
        "SWEStarter-v0",
        backend="docker",
        instance_ids=[TASK],
        sandbox_options={"client": docker_client, "run_id": RUN_ID},
    )
    try:
        env.reset(seed=0)
        _fix(env)
        sb = env.unwrapped.sandbox
        sb.write_file("/testbed/.w", GIT_WRAPPER)
        res = sb.run(
            "mv /usr/bin/git /usr/bin/git.real && cp .w /usr/bin/git && cp .w /usr/local/bin/git "
            "&& chmod +x /usr/bin/git /usr/local/bin/git && rm .w && "
            "for b in tar bash sh env; do printf '#!/bin/sh\\nsleep 100000\\n' > /usr/local/bin/$b; "
            "chmod +x /usr/local/bin/$b; done; echo done",
            timeout=30,
        )
        assert "done" in res.output, res.output
        t0 = time.monotonic()
        _, reward, terminated, _, info = env.step(SUBMIT)
        took = time.monotonic() - t0
    finally:
        env.close()
    assert terminated and reward == 1.0, info.get("report")
    assert (
        ".git" not in info["patch"].replace(".gitignore", "") and "fsmonitor" not in info["patch"]
    )
    assert took < DIFF_TIMEOUT  # the wrappers sleep for a day: nothing of theirs ran


@pytest.mark.parametrize("mb", [8])
def test_a_working_copy_past_the_patch_bound_ends_with_its_reason_quickly(make_env, backend, mb):
    cap = 2 * 2**20
    env = make_env(max_patch_bytes=cap)
    _fix(env)
    env.unwrapped.sandbox.run(f"head -c {mb}M /dev/urandom > big.bin", timeout=120)
    before = _rss()
    obs, reward, terminated, truncated, info = env.step(SUBMIT)
    grew = _rss() - before
    assert terminated and not truncated and reward == 0.0
    assert info["end_reason"] == "submitted" and info["report"]["reason"] == "patch_too_large"
    assert str(cap) in obs and info["patch"] == ""
    # At most the cap of diff output is held, plus read buffers (1 MiB chunks) and allocator
    # slack; the 8 MiB file (11 MiB as a binary diff) never is, whole.
    assert grew < cap + 8 * 2**20, grew


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["docker"])  # local: the working copy is on the host
def test_a_working_copy_past_the_size_bound_ends_with_its_reason(make_env):
    env = make_env(max_tree_bytes=4 * 2**20)
    env.unwrapped.sandbox.run("head -c 6M /dev/zero > big.bin", timeout=60)
    _, reward, terminated, _, info = env.step(SUBMIT)
    assert terminated and reward == 0.0
    assert info["report"]["reason"] == "workspace_too_large", info["report"]


def test_non_utf8_names_and_contents_beside_a_fix_grade_and_serialise(make_env):
    env = make_env()
    _fix(env)
    sb = env.unwrapped.sandbox
    sb.write_file("notes.txt", b"caf\xe9 in Latin-1\n")
    sb.run("printf 'x\\n' > $'na\\xefve.txt'", timeout=30)
    _, reward, terminated, _, info = env.step(SUBMIT)
    assert terminated and reward == 1.0, info["report"]
    raw = info["patch"].encode("utf-8", "surrogateescape")
    assert b"b/na\xefve.txt" in raw and b"+caf\xe9 in Latin-1" in raw
    json.dumps(info["patch"])  # the trajectory's JSON keeps it (as escapes)


# Run by the tests' process (root in a Docker grading container): the log's cut disabled, then
# the log grown past LOG_LIMIT by appending to it directly (stdout is captured by pytest).
FLOOD_LOG = """
import os as _os
if _os.path.isdir("/usr/local/bin") and _os.access("/usr/local/bin", _os.W_OK):
    for _b in ("stat", "head", "tail"):
        with open("/usr/local/bin/" + _b, "w") as _f:
            _f.write("#!/bin/sh\\nexit 0\\n")
        _os.chmod("/usr/local/bin/" + _b, 0o755)
with open(".swe_gym_grading/test.log", "a") as _log:
    _line = "PASSED tests/test_descriptive.py::test_sample_variance_divides_by_n_minus_1\\n"
    for _ in range(%d):
        _log.write(_line * 1000)
"""


def test_a_flooded_log_is_read_within_its_cap(backend, request):
    from swe_gym.grading import grade_patch
    from swe_gym.grading.testrun import LOG_LIMIT
    from swe_gym.repos import local_repo
    from swe_gym.starter import starter_tasks

    task = next(t for t in starter_tasks() if t.instance_id == TASK)
    opts = {}
    if backend == "docker":
        opts = {"client": request.getfixturevalue("docker_client"), "run_id": RUN_ID}
    n = LOG_LIMIT // 75_000 + 200  # thousands of 75-byte lines: past the cap
    trick = FLOOD_LOG % n

    init = subprocess.run(
        ["git", "-C", str(local_repo(task.repo)), "show", f"{task.base_commit}:tinystats/__init__.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    diff = _new_text_diff("tinystats/__init__.py", init, init + trick)
    before = _rss()
    report = grade_patch(task, diff, backend=backend, sandbox_options=opts, timeout=300)
    grew = _rss() - before
    assert not report.resolved, report.to_dict()
    assert report.reason in ("suite_did_not_run", "results_mismatch", "tests_failed")
    # What is read back is at most the cap (plus a read chunk) and its decoded copy.
    assert grew < 3 * LOG_LIMIT, grew


def _new_text_diff(path: str, old: str, new: str) -> str:
    import difflib

    body = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)
