"""Test-infrastructure protection: a model patch cannot change how the tests run.

Grading applies the model patch, then *reverts* every path it changed that belongs to the test
infrastructure (restored to ``base_commit``, or deleted if it did not exist there), then
applies the task's test patch and runs the tests. The reverted paths are reported
(``GradingReport.dropped``). A path the patch changed is test infrastructure when:

- it is one of the task's test files (the test patch's paths) or an ancestor directory of one
  (e.g. the patch turned ``tests/`` into a symlink);
- it lies under a test directory: ``tests/`` at any depth, or ``test/`` / ``testing/`` at the
  top level (``django/test/`` or ``numpy/testing/`` are library code and stay editable), or
  its name is ``test_*.py`` / ``*_test.py``;
- its name is ``conftest.py``, ``pytest.ini``, ``.pytest.ini``, ``tox.ini`` (whole file),
  ``sitecustomize.py``, ``usercustomize.py`` or ``*.pth``, or it is compiled bytecode
  (``__pycache__``, ``*.pyc``), pytest's cache (``.pytest_cache``) or installed metadata
  (``*.egg-info`` / ``*.dist-info``: entry points register plugins);
- it is a *new* module named like the test runner (``pytest``, ``_pytest``, ``pluggy``,
  ``py``), which would shadow it on ``sys.path`` (editing an existing one, as in pytest's own
  repository, is allowed);
- it is a ``pyproject.toml`` or ``setup.cfg`` whose test configuration changed
  (``[tool.pytest*]``, ``[tool:pytest]``, ``pytest11`` entry points) or that no longer parses.
  Such a file is reverted whole: its other edits (``[project]`` metadata) are lost with it;
  edits that leave the test configuration alone are kept.

A patch touching ``.git`` is refused outright (``model_patch_failed``): git would read it.

Not covered, by nature: the patched library code itself runs inside the test process and can
still misbehave on purpose (monkeypatch the runner, print fake results, exit early). This rule
removes the cheap file-level routes, not the need to review surprising rewards.
"""

from __future__ import annotations

import configparser
import posixpath
import re
import shlex
import tomllib
from typing import Any

from swe_gym.sandbox import Sandbox

WORK_DIR = ".swe_gym_grading"  # grading's scratch folder inside the working copy
_ALWAYS = {
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "sitecustomize.py",
    "usercustomize.py",
}
_NO_NEW = {"pytest", "_pytest", "pluggy", "py"}  # runner modules a new file must not shadow
_META = (".egg-info", ".dist-info")
_HEADER = re.compile(r"^(?:diff --git |--- |\+\+\+ |rename (?:from|to) |copy (?:from|to) )(.*)$")
# ctime ticks can be as coarse as a jiffy: wait past one so every file the patch writes is newer.
_TICK_S = 0.03


def git_path_in_patch(patch: str) -> str | None:
    """The first header path of ``patch`` with a ``.git`` component, or None."""
    for line in patch.splitlines():
        m = _HEADER.match(line)
        if m and ".git" in re.split(r"[/\s\\]+", m.group(1)):
            return m.group(1).strip()
    return None


def protected_by_name(path: str, test_files: list[str], in_base: bool) -> bool:
    """Whether ``path`` is test infrastructure by its name alone (see the module doc)."""
    parts = path.split("/")
    name = parts[-1]
    if path in test_files or any(t.startswith(path + "/") for t in test_files):
        return True
    if "tests" in parts[:-1] or (len(parts) > 1 and parts[0] in ("test", "testing")):
        return True
    if name in _ALWAYS or name.endswith((".pth", ".pyc", ".pyo")):
        return True
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        return True
    if "__pycache__" in parts or ".pytest_cache" in parts or any(p.endswith(_META) for p in parts):
        return True
    if not in_base and any(p.removesuffix(".py") in _NO_NEW for p in parts):
        return True
    return False


def _pyproject_tests(text: str) -> Any:
    data = tomllib.loads(text)
    tool = data.get("tool", {})
    return (
        {k: v for k, v in tool.items() if k.startswith("pytest")},
        data.get("project", {}).get("entry-points", {}).get("pytest11"),
        tool.get("poetry", {}).get("plugins", {}).get("pytest11"),
    )


def _setup_cfg_tests(text: str) -> Any:
    cp = configparser.RawConfigParser(strict=False, interpolation=None)
    cp.read_string(text)
    sections = {s: dict(cp[s]) for s in cp.sections() if s in ("tool:pytest", "pytest")}
    eps = dict(cp["options.entry_points"]) if cp.has_section("options.entry_points") else {}
    return sections, eps.get("pytest11")


def changes_test_config(path: str, before: str | None, after: str | None) -> bool:
    """For ``pyproject.toml`` / ``setup.cfg``: did the patch change its test configuration?
    Other files: False. A file that no longer parses counts as changed."""
    name = posixpath.basename(path)
    extract = {"pyproject.toml": _pyproject_tests, "setup.cfg": _setup_cfg_tests}.get(name)
    if extract is None:
        return False
    if after is None:  # deleted: only the base's test configuration is lost
        before, after = after, before
    try:
        new = extract(after)
    except Exception:
        return True
    try:
        old = extract(before) if before is not None else extract("")
    except Exception:
        return True
    return old != new


def start_watch(sandbox: Sandbox) -> None:
    """Mark the time before the model patch is applied (see ``changed_paths``)."""
    wd = shlex.quote(sandbox.workdir)
    sandbox.run(
        f"cd {wd} && mkdir -p {WORK_DIR} && touch {WORK_DIR}/stamp && sleep {_TICK_S}", timeout=30
    )


def _read_list(sandbox: Sandbox, rel: str) -> list[str]:
    raw = sandbox.read_file(rel).decode("utf-8", "surrogateescape")
    return [p for p in raw.split("\0") if p]


def changed_paths(sandbox: Sandbox) -> list[str]:
    """Paths (files and links, not folders) changed since ``start_watch``: tracked files git
    sees modified, deleted or retyped, plus every file written since (ignored ones included)."""
    wd = shlex.quote(sandbox.workdir)
    sandbox.run(
        f"cd {wd} && git -c core.quotepath=off status --porcelain=v1 -z --untracked-files=no "
        f"--no-renames > {WORK_DIR}/status; find . -path ./.git -prune -o -path ./{WORK_DIR} -prune "
        f"-o ! -type d -cnewer {WORK_DIR}/stamp -print0 > {WORK_DIR}/newer",
        timeout=300,
    )
    paths = {entry[3:] for entry in _read_list(sandbox, f"{WORK_DIR}/status")}
    paths |= {p.removeprefix("./") for p in _read_list(sandbox, f"{WORK_DIR}/newer")}
    return sorted(paths)


def _in_base(sandbox: Sandbox, base: str, paths: list[str]) -> set[str]:
    sandbox.write_file(f"{WORK_DIR}/paths", "\0".join(paths) + "\0")
    wd = shlex.quote(sandbox.workdir)
    sandbox.run(
        f"cd {wd} && while IFS= read -r -d '' p; do git cat-file -e {base}:\"$p\" 2>/dev/null "
        f"&& printf '%s\\0' \"$p\"; done < {WORK_DIR}/paths > {WORK_DIR}/inbase",
        timeout=300,
    )
    return set(_read_list(sandbox, f"{WORK_DIR}/inbase"))


def _text(sandbox: Sandbox, path: str) -> str | None:
    try:
        return sandbox.read_file(path).decode("utf-8")
    except FileNotFoundError:
        return None


def _base_text(sandbox: Sandbox, base: str, path: str) -> str:
    wd = shlex.quote(sandbox.workdir)
    sandbox.run(f"cd {wd} && git show {base}:{shlex.quote(path)} > {WORK_DIR}/base_cfg", timeout=60)
    return sandbox.read_file(f"{WORK_DIR}/base_cfg").decode("utf-8", "replace")


def revert_test_infra(sandbox: Sandbox, base_commit: str, test_files: list[str]) -> list[str]:
    """Revert the test-infrastructure paths changed since ``start_watch``; returns them."""
    changed = changed_paths(sandbox)
    if not changed:
        return []
    in_base = _in_base(sandbox, base_commit, changed)
    dropped = []
    for path in changed:
        if protected_by_name(path, test_files, path in in_base):
            dropped.append(path)
        elif posixpath.basename(path) in ("pyproject.toml", "setup.cfg"):
            try:
                after = _text(sandbox, path)
            except (ValueError, OSError, UnicodeDecodeError):  # a link out, a folder, binary
                dropped.append(path)
                continue
            before = _base_text(sandbox, base_commit, path) if path in in_base else None
            if changes_test_config(path, before, after):
                dropped.append(path)
    if dropped:
        restore(sandbox, base_commit, dropped, in_base)
    return dropped


def restore(sandbox: Sandbox, base_commit: str, paths: list[str], in_base: set[str]) -> None:
    """Remove ``paths`` (ancestors first, so a link is removed, not followed), then check out
    those that exist at ``base_commit``."""
    ordered = sorted(paths, key=lambda p: (p.count("/"), p))
    sandbox.write_file(f"{WORK_DIR}/drop", "\0".join(ordered) + "\0")
    keep = [p for p in ordered if p in in_base]
    sandbox.write_file(f"{WORK_DIR}/restore", "\0".join(keep) + "\0")
    wd = shlex.quote(sandbox.workdir)
    cmd = f"cd {wd} && xargs -0 rm -rf -- < {WORK_DIR}/drop"
    if keep:
        cmd += (
            f" && git --literal-pathspecs checkout -q {base_commit} --pathspec-from-file={WORK_DIR}/restore "
            "--pathspec-file-nul"
        )
    res = sandbox.run(f"{cmd}; echo rc=$?", timeout=300)
    if "rc=0" not in res.output:
        raise RuntimeError(f"restoring test infrastructure failed: {res.output[-2000:]}")
