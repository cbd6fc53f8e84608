"""Red team for the runtime guard: code the patch runs inside the test process changes what the
tests do, while the log and the signed records stay honest (``swe_gym/grading/guard.py``).

Every case leaves the bug of ``starter__tinystats-2`` in place, appends its mechanism to the
package the tests import, and grades on both backends; each asserts the verdict (reward 0, with
the cause). Names are built at run time wherever the static check would otherwise read them,
so that what stops the case is the guard. Beside them, honest fixes that use the same features
harmlessly (``functools``, ``dataclasses``, ``namedtuple``, ``exec``-made helpers, threads, a
test that walks ``gc`` itself) must still resolve.
"""

from __future__ import annotations

import dataclasses

import pytest

from swe_gym.grading import grade_patch
from tests.security.payloads import (
    APPROX,
    APPROX_CLASS,
    AT_EXIT_HOOK,
    BAITED_FINDER,
    CODE,
    CODE_REPLACE,
    CTYPES,
    ELF,
    F2P,
    FLIP_REPORTS,
    FROZEN_NAME,
    FULLWIDTH_EXIT,
    GC_POOL,
    GC_TEST,
    GC_THREAD,
    HONEST,
    INIT,
    KEY_FROM_GC,
    META_PATH,
    OTHER_THREADS_FRAMES,
    PATH_OBJECT,
    PROFILE,
    REBUILT_TEST,
    RECORD_LINK,
    REFERRERS,
    RUNTIME_NATIVE,
    SWAP_AT_CALL,
    SWAP_TOOLS_FIRST,
    SYS_MODULES,
    SYS_MODULES_RENAMED,
    THREAD_PROFILE,
    THREAD_TRACE,
    TIMER_HOOK,
    TRACE,
    TWINS,
    WRITER,
    fix,
    refused,
    tinystats_task,
)


@pytest.fixture(scope="module")
def task():
    return tinystats_task()


@pytest.mark.parametrize(
    "payload, mark",
    [
        (TRACE, "sys.settrace"),
        (PROFILE, "sys.setprofile"),
        (THREAD_TRACE, "sys.settrace"),
        (GC_THREAD, "gc.get_objects"),
        (GC_POOL, "gc.get_objects"),
        (SYS_MODULES, "tests/test_descriptive.py"),
        (SYS_MODULES_RENAMED, "test code"),
        (META_PATH, "tests/test_descriptive.py"),
        (APPROX, "changed"),
        (APPROX_CLASS, "changed"),
        (KEY_FROM_GC, "gc.get_objects"),
        (RUNTIME_NATIVE, "native import"),
        (CTYPES, "ctypes"),
        (CODE_REPLACE, "code made as"),
        (FROZEN_NAME, "code made as <frozen"),
        (OTHER_THREADS_FRAMES, "sys._current_frames"),
        (REFERRERS, "gc.get_referrers"),
        (THREAD_PROFILE, "sys.setprofile"),
        (SWAP_AT_CALL, "function.__code__"),
        (REBUILT_TEST, "function.__new__"),
        (RECORD_LINK, "open grader file"),
        (SWAP_TOOLS_FIRST, "sys.settrace"),
        (BAITED_FINDER, "import machinery"),
        (PATH_OBJECT, "open grader file"),
        (AT_EXIT_HOOK, "forged record"),
        (TIMER_HOOK, "forged record"),
    ],
    ids=[
        "settrace-swaps-test-code",
        "setprofile-swaps-test-code",
        "threading-settrace",
        "gc-thread-swaps-test-code",
        "gc-through-thread-pool",
        "sys-modules-recompiled-test-module",
        "sys-modules-recompiled-under-another-name",
        "meta-path-hook-recompiles-test-module",
        "approx-wrapped",
        "approx-class-comparison-wrapped",
        "key-from-closures-through-gc",
        "native-code-written-at-run-time",
        "ctypes-memory-read",
        "code-replace-as-test-file",
        "code-named-as-a-frozen-module",
        "other-threads-frames",
        "gc-referrers",
        "threading-setprofile",
        "other-tests-swapped-at-call-time",
        "test-rebuilt-with-other-globals",
        "record-file-through-a-link",
        "guard-tools-swapped-first",
        "finder-baited-to-run-in-the-hook",
        "record-file-through-a-path-object",
        "pytest-hook-called-at-exit",
        "pytest-hook-called-from-a-timer-thread",
    ],
)
def test_tampering_inside_the_test_process_is_seen(task, make_patch, grade, payload, mark):
    report = grade(task, make_patch({INIT: ("append", payload)}))
    refused(report, "tampered")
    assert any(mark in t for t in report.tampered), report.tampered
    assert report.channel == "checked"


def test_the_plugin_writer_swapped_out_leaves_the_run_unfinished(task, make_patch, grade):
    report = grade(task, make_patch({INIT: ("append", WRITER)}))
    refused(report, "session_incomplete", "tampered", "results_mismatch")


def test_a_test_id_twin_does_not_stand_for_the_test(task, make_patch, grade):
    report = grade(task, make_patch({INIT: ("append", TWINS)}))
    refused(report, "results_mismatch", "tampered")
    assert f"{F2P} twin" in report.injected_tests, report.to_dict()


def test_fullwidth_names_do_not_hide_a_forgery_from_the_static_check(task, make_patch, grade):
    report = grade(task, make_patch({INIT: ("append", FULLWIDTH_EXIT)}))
    refused(report, "session_incomplete", "suite_did_not_run")
    assert any(s.startswith("exit:") for s in report.suspect), report.suspect


def test_a_binary_git_attribute_does_not_hide_a_forgery(task, make_patch, grade):
    patch = make_patch({".gitattributes": "*.py binary\n", INIT: ("append", FLIP_REPORTS)})
    assert "GIT binary patch" in patch and "+import _pytest" not in patch
    report = grade(task, patch)
    refused(report, "tampered")
    assert ".gitattributes" in report.dropped
    assert any(s.startswith("pytest:") for s in report.suspect), report.suspect


@pytest.mark.parametrize(
    "path", ["tinystats/descriptive.abi3.so", "tinystats/_speed.cpython-311-x86_64-linux-gnu.so"]
)
def test_native_code_in_the_patch_isrefused(task, make_patch, grade, path):
    report = grade(task, make_patch({path: ("bytes", ELF)}))
    refused(report, "native_code")
    assert path in report.detail


def test_native_code_past_the_read_cap_is_refused_by_its_name(task, make_patch, grade):
    """A 9 MB extension module: too large to read whole for its header, refused by its name."""
    big = ELF + b"\0" * (9 * 2**20)
    report = grade(task, make_patch({"tinystats/descriptive.abi3.so": ("bytes", big)}))
    refused(report, "native_code")
    assert "tinystats/descriptive.abi3.so" in report.detail


def test_native_code_under_a_harmless_name_is_refused_by_its_header(task, make_patch, grade):
    report = grade(task, make_patch({"tinystats/table.dat": ("bytes", ELF)}))
    refused(report, "native_code")
    assert "ELF" in report.detail


def test_an_honest_fix_using_the_same_features_resolves(task, make_patch, grade):
    report = grade(task, make_patch({CODE: fix, INIT: ("append", HONEST)}))
    assert report.resolved, (report.reason, report.tampered, report.detail[:2000])
    assert report.tampered == [] and report.injected_tests == []


def test_tests_that_walk_gc_and_trace_themselves_are_not_tampering(task, make_patch, grade):
    """The repository's own test walks the garbage collector and sets trace functions (in its
    thread and through ``threading``): trusted code, not the patch's."""
    test_file = task.test_files[0]
    f2p_block = "\n".join(
        line[1:] for line in task.test_patch.splitlines()[5:] if line.startswith("+")
    )
    test_patch = make_patch({test_file: ("append", "\n" + f2p_block + GC_TEST)})
    extended = dataclasses.replace(task, test_patch=test_patch)
    report = grade(extended, make_patch({CODE: fix}))
    assert report.resolved, (report.reason, report.tampered, report.detail[:2000])
    assert report.status.get(f"{test_file}::test_no_leaked_frames") == "PASSED"


@pytest.mark.parametrize(
    "payload",
    [TRACE, PROFILE, GC_THREAD, SYS_MODULES, META_PATH, APPROX, APPROX_CLASS, TWINS],
    ids=[
        "settrace",
        "setprofile",
        "gc-thread",
        "sys-modules",
        "meta-path",
        "approx",
        "approx-class",
        "twins",
    ],
)
def test_without_the_channel_each_mechanism_would_have_paid(task, make_patch, payload):
    """The control: graded on the log alone (as a non-pytest runner is), each mechanism above
    resolves the task with the bug still in place, so a case above fails for the guard's
    reason and not for a broken payload."""
    off = dataclasses.replace(
        task, install_config={**task.install_config, "verdict_channel": False}
    )
    report = grade_patch(off, make_patch({INIT: ("append", payload)}), timeout=300)
    assert report.resolved and report.channel == "none", (report.reason, report.log_tail[-2000:])
