"""Files the install step generated in the tree, put into each fresh working copy.

An editable install leaves files in the tree that the tests need (``*.egg-info`` with the
entry points, setuptools-scm's ``_version.py``, in-place extensions). They are kept with the
environment (``build._keep_generated``) and copied into every working copy at start, never
over a file the base commit has. Their paths go to ``info/exclude`` of the working copy's git
dir and of the diff's private git dir: they are the environment's, not the agent's change, so
they appear neither in ``git status`` nor in the submitted diff.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from swe_gym.taskenv.build import TaskEnv

_GLOB_CHARS = "\\[]*?!# "


def _pattern(rel: str) -> str:
    """An anchored, literal gitignore pattern for ``rel``."""
    return "/" + "".join("\\" + c if c in _GLOB_CHARS else c for c in rel)


def copy_generated(env: TaskEnv, workdir: Path, git_dirs: list[Path]) -> list[str]:
    """Copy the environment's generated files into ``workdir``; returns the paths copied."""
    copied = []
    for rel in env.generated:
        src, dst = env.tree / rel, workdir / rel
        if os.path.lexists(dst) or not os.path.lexists(src):
            continue  # the base commit has it: the tree's own wins
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        if not dst.is_symlink():
            dst.chmod(0o644 | (dst.stat().st_mode & 0o111))
        copied.append(rel)
    if copied:
        lines = "".join(_pattern(r) + "\n" for r in copied)
        for g in git_dirs:
            (g / "info").mkdir(parents=True, exist_ok=True)
            with (g / "info" / "exclude").open("a") as f:
                f.write(lines)
    return copied


__all__ = ["copy_generated"]
