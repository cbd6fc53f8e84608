"""A strict hidden test per synthetic task, from calls the repository's own tests make.

The failing tests of an accepted candidate are run once more on the clean code with the mutated
function wrapped: every call whose arguments and result are plain literal values (their ``repr``
reads back as an equal value of the same type) is recorded, arguments taken before the call.
The hidden test replays up to ``limit`` of those calls whose arguments the issue does not quote
and compares each result strictly: the same type at every level of a container, then ``==``. A
result of a subclass, or an object whose ``==`` is always true, fails it; so does a patch that
special-cases the issue's examples. The test is kept only when the mutant fails it (it joins
``FAIL_TO_PASS``); it ships as the row's ``test_patch`` and is never in the issue text.

Module-level functions only: a method's calls need an instance the test cannot rebuild from
literals. The recorder runs in the validation sandbox with the suite's own interpreter.
"""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import PurePosixPath
from typing import Any

from swe_gym.synth.validate import Validator

HIDDEN_NAME = "test_swe_gym_hidden.py"
_RECORDER = ".swe_gym_record.py"
_RECORD_OUT = ".swe_gym_record.json"

RECORDER = r"""
import ast, functools, importlib, json, sys
cfg = json.load(open(sys.argv[1]))
sys.path.insert(0, ".")
mod = importlib.import_module(cfg["module"])
calls = []
out = {"calls": calls, "error": None}
def lit(x):
    try:
        r = repr(x)
        back = ast.literal_eval(r)
    except Exception:
        return None
    return r if type(back) is type(x) and back == x and repr(back) == r else None
def main(orig):
    if not callable(orig) or isinstance(orig, type):
        out["error"] = "not a plain function"
        return

    @functools.wraps(orig)
    def wrapper(*a, **k):
        ra, rk = lit(tuple(a)), lit(dict(k))
        r = orig(*a, **k)
        rr = lit(r)
        if None not in (ra, rk, rr) and len(calls) < 500:
            calls.append([ra, rk, rr])
        return r

    for m in list(sys.modules.values()):  # every module that bound the name already
        d = getattr(m, "__dict__", None)
        if isinstance(d, dict) and m is not sys.modules["__main__"]:
            for key, value in list(d.items()):
                if value is orig:
                    d[key] = wrapper
    import pytest
    pytest.main(["-q", "-p", "no:cacheprovider", *cfg["tests"]])
main(mod.__dict__.get(cfg["name"]))
json.dump(out, open(cfg["out"], "w"))
"""

_TEST = '''"""Hidden test of this task (written by swe_gym.synth): calls recorded from the repository's
own tests on the correct code, compared by type and value."""

from {module} import {name} as _f

CASES = [
{cases}]


def _same(got, want):
    if type(got) is not type(want):
        return False
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, float) and want != want:
        return got != got
    return bool(got == want)


def test_hidden_{name}():
    for args, kwargs, want in CASES:
        got = _f(*args, **kwargs)
        assert _same(got, want), (args, kwargs, got, want)
'''


def module_name(path: str) -> str | None:
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return None
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts and all(x.isidentifier() for x in parts) else None


_PYTHON = "$(command -v python3 || command -v python)"  # the suite's own interpreter on PATH


def record(
    validator: Validator, path: str, qualname: str, tests: list[str], timeout: float
) -> list[tuple[str, str, str]]:
    """``(args repr, kwargs repr, result repr)`` of the calls ``tests`` make of ``qualname``
    in ``path`` on the clean code (empty when it is not a module-level function)."""
    module = module_name(path)
    if module is None or "." in qualname or "<" in qualname:
        return []
    sb = validator.sandbox
    wd = sb.workdir.rstrip("/")
    cfg = {"module": module, "name": qualname, "tests": tests, "out": f"{wd}/{_RECORD_OUT}"}
    sb.write_file(_RECORDER, RECORDER)
    sb.write_file(".swe_gym_record_cfg.json", json.dumps(cfg))
    try:
        sb.run(
            f"cd {shlex.quote(wd)} && export PYTHONDONTWRITEBYTECODE=1; "
            f"{_PYTHON} {_RECORDER} .swe_gym_record_cfg.json > /dev/null 2>&1",
            timeout=timeout,
        )
        try:
            data = json.loads(sb.read_file(_RECORD_OUT).decode("utf-8"))
        except (FileNotFoundError, ValueError):
            return []
    finally:
        validator.reset()
    return [tuple(c) for c in data.get("calls", []) if isinstance(c, list) and len(c) == 3]


def _quoted(args: str, kwargs: str, quoted: list[tuple[tuple, dict]], issue: str) -> bool:
    """Whether the issue shows the call (``literals.issue_calls``) or one of its argument
    values of three characters or more."""
    a, k = ast.literal_eval(args), ast.literal_eval(kwargs)
    if (a, k) in quoted:
        return True
    values: list[Any] = [*a, *k.values()]
    return any(len(repr(v)) >= 3 and repr(v) in issue for v in values)


def hidden_test(
    path: str, name: str, calls: list[tuple[str, str, str]], issue: str, limit: int = 12
) -> str | None:
    """The hidden test file's text, or None when no recorded call is left to replay."""
    from swe_gym.audit.literals import issue_calls  # lazy: swe_gym.audit imports synth

    module = module_name(path)
    quoted = issue_calls(issue, name)
    seen: set[tuple[str, str]] = set()
    cases: list[str] = []
    for args, kwargs, result in calls:
        if (args, kwargs) in seen or _quoted(args, kwargs, quoted, issue):
            continue
        seen.add((args, kwargs))
        cases.append(f"    ({args}, {kwargs}, {result}),\n")
        if len(cases) >= limit:
            break
    if module is None or not cases:
        return None
    return _TEST.format(module=module, name=name, cases="".join(cases))


def hidden_path(tests: list[str]) -> str:
    """Beside the first failing test's file (its conftest and import set-up apply)."""
    first = tests[0].split("::", 1)[0]
    parent = PurePosixPath(first).parent
    return str(parent / HIDDEN_NAME) if str(parent) != "." else HIDDEN_NAME


def fails_on_mutant(
    validator: Validator, path: str, mutant: str, test_path: str, test_text: str, timeout: float
) -> bool:
    """Whether the hidden test fails with the mutant in place (and passes on the clean code)."""
    sb = validator.sandbox
    wd = shlex.quote(sb.workdir)
    cmd = f"cd {wd} && export PYTHONDONTWRITEBYTECODE=1; {validator.test_cmd} -p no:cacheprovider {shlex.quote(test_path)} > /dev/null 2>&1; echo __rc=$?"

    def rc() -> int | None:
        out = sb.run(cmd, timeout=timeout).output
        tail = out.rsplit("__rc=", 1)[-1].split()
        return int(tail[0]) if tail and tail[0].isdigit() else None

    try:
        sb.write_file(test_path, test_text)
        clean = rc()
        sb.write_file(path, mutant)
        buggy = rc()
    finally:
        validator.reset()
    return clean == 0 and buggy == 1


__all__ = ["HIDDEN_NAME", "fails_on_mutant", "hidden_path", "hidden_test", "module_name", "record"]
