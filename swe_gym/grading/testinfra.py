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
- its name, in any letter case, is ``conftest.py``, ``pytest.ini``, ``.pytest.ini``,
  ``pytest.toml``, ``.pytest.toml``, ``tox.ini`` (whole file),
  ``sitecustomize.py``, ``usercustomize.py``, ``.gitattributes`` or ``*.pth``, or it is compiled bytecode
  (``__pycache__``, ``*.pyc``), pytest's cache (``.pytest_cache``) or installed metadata
  (``*.egg-info`` / ``*.dist-info``: entry points register plugins);
- it is a *new* module named like the test runner (``pytest``, ``_pytest``, ``pluggy``,
  ``py``), which would shadow it on ``sys.path`` (editing an existing one, as in pytest's own
  repository, is allowed), or a new top-level module named like one the task's environment
  installs (its plugins, their dependencies);
- it is a case variant of ``pyproject.toml`` or ``setup.cfg``;
- it is a ``pyproject.toml`` or ``setup.cfg`` whose test configuration changed
  (``[tool.pytest*]``, ``[tool:pytest]``, ``pytest11`` entry points) or that no longer parses.
  Such a file is reverted whole: its other edits (``[project]`` metadata) are lost with it;
  edits that leave the test configuration alone are kept.

A patch touching ``.git`` is refused outright (``swe_gym.grading.patches.unsafe_path``).

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
_ALWAYS = {  # compared in lower case: a case variant is dropped as well
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "tox.ini",
    "sitecustomize.py",
    "usercustomize.py",
    ".gitattributes",  # it decides how git shows a file (``binary`` hides a diff's lines)
}
_CONFIGS = ("pyproject.toml", "setup.cfg")  # reverted when their test configuration changed
_NO_NEW = {"pytest", "_pytest", "pluggy", "py"}  # runner modules a new file must not shadow
_META = (".egg-info", ".dist-info")
_HEADER = re.compile(r"^(?:diff --git |--- |\+\+\+ |rename (?:from|to) |copy (?:from|to) )(.*)$")
# ctime ticks can be as coarse as a jiffy: wait past one so every file the patch writes is newer.
_TICK_S = 0.03


def protected_by_name(
    path: str, test_files: list[str], in_base: bool, shadowed: frozenset[str] = frozenset()
) -> bool:
    """Whether ``path`` is test infrastructure by its name alone (see the module doc). Names
    are compared in lower case. ``shadowed``: installed top-level modules the base does not
    hold; a new top-level file or folder named like one would be imported in its place."""
    parts = path.split("/")
    low = [p.lower() for p in parts]
    name = low[-1]
    if path in test_files or any(t.startswith(path + "/") for t in test_files):
        return True
    if "tests" in low[:-1] or (len(low) > 1 and low[0] in ("test", "testing")):
        return True
    if name in _ALWAYS or name.endswith((".pth", ".pyc", ".pyo")):
        return True
    if name in _CONFIGS and parts[-1] != name:  # a case variant of a config file
        return True
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        return True
    if "__pycache__" in low or ".pytest_cache" in low or any(p.endswith(_META) for p in low):
        return True
    if not in_base and any(p.removesuffix(".py") in _NO_NEW for p in low):
        return True
    if not in_base and parts[0].split(".")[0] in shadowed:
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
    if after is None:  # on neither side: nothing to read, counted as changed (reverted)
        return True
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


def _nul_list(paths: list[str]) -> bytes:
    """Paths as git prints them with ``-z`` (names are bytes: undecodable ones kept)."""
    return "".join(p + "\0" for p in paths).encode("utf-8", "surrogateescape")


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
    """Which of ``paths`` exist at commit ``base`` (files, links or folders)."""
    sandbox.write_file(f"{WORK_DIR}/paths", _nul_list(paths))
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


def _base_top(sandbox: Sandbox, base: str) -> set[str]:
    """Module names the base commit's top level holds (``x.py``, ``x/``)."""
    wd = shlex.quote(sandbox.workdir)
    sandbox.run(f"cd {wd} && git ls-tree -z --name-only {base} > {WORK_DIR}/top", timeout=60)
    return {p.split(".")[0] for p in _read_list(sandbox, f"{WORK_DIR}/top")}


def revert_test_infra(
    sandbox: Sandbox,
    base_commit: str,
    test_files: list[str],
    installed: set[str] | None = None,
    changed: list[str] | None = None,
) -> list[str]:
    """Revert the test-infrastructure paths changed since ``start_watch``; returns them.
    ``installed``: the environment's top-level module names (``swe_gym.grading.verdict``);
    ``changed``: ``changed_paths`` when the caller has it already."""
    changed = changed_paths(sandbox) if changed is None else changed
    if not changed:
        return []
    in_base = _in_base(sandbox, base_commit, changed)
    shadowed = frozenset((installed or set()) - _base_top(sandbox, base_commit))
    dropped = []
    for path in changed:
        if protected_by_name(path, test_files, path in in_base, shadowed):
            dropped.append(path)
        elif posixpath.basename(path) in _CONFIGS:
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
    sandbox.write_file(f"{WORK_DIR}/drop", _nul_list(ordered))
    keep = [p for p in ordered if p in in_base]
    sandbox.write_file(f"{WORK_DIR}/restore", _nul_list(keep))
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
    # Folders the dropped files leave empty go too (git tracks no empty folder): an empty
    # ``X.dist-info`` would still be read as a distribution.
    parents = sorted(
        {p.rsplit("/", i)[0] for p in ordered for i in range(1, p.count("/") + 1)},
        key=lambda p: (-p.count("/"), p),
    )
    if parents:
        sandbox.write_file(f"{WORK_DIR}/parents", _nul_list(parents))
        sandbox.run(
            f"cd {wd} && xargs -0 rmdir --ignore-fail-on-non-empty -- < {WORK_DIR}/parents "
            "2>/dev/null; true",
            timeout=60,
        )


def reset_to_base(sandbox: Sandbox, base_commit: str, paths: list[str]) -> None:
    """Put ``paths`` back as they are at ``base_commit``: each removed, then checked out where
    it exists there (so one that did not exist is deleted)."""
    if paths:
        restore(sandbox, base_commit, paths, _in_base(sandbox, base_commit, paths))
