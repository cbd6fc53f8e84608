"""The recipe's install step, run once per environment in a bubblewrap sandbox.

The working copy of the setup commit is at ``/testbed`` (as in every task sandbox, so an
editable install's paths stay right there), the environment's directory is writable at its
host path, the interpreter's prefix read-only; PyPI is reachable (build dependencies), the
host's home, caches and this project are not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from swe_gym.sandbox.mounts import SANDBOX_WORKDIR, bwrap_mounts
from swe_gym.sandbox.objects import base_pack, init_repo
from swe_gym.taskenv.build import INSTALL_TIMEOUT, EnvBuildError
from swe_gym.taskenv.pythons import host_prefix
from swe_gym.taskenv.recipe import Recipe


def make_runner(repo_name: str, repo: Path, env_vars: dict[str, str] | None = None):  # noqa: ANN201
    """A ``runner(recipe, commands, venv, log) -> checkout`` for ``build.ensure``."""

    def run(recipe: Recipe, commands: list[str], venv: Path, log: Path) -> Path:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise EnvBuildError("the install step needs bubblewrap (apt-get install bubblewrap)")
        pack = base_pack(repo_name, repo, recipe.setup_commit)
        tmp = Path(tempfile.mkdtemp(prefix="swe_gym_envbuild_"))
        checkout = tmp / "testbed"
        checkout.mkdir()
        init_repo(checkout / ".git", pack, work_tree=checkout)
        os.chmod(tmp, 0o755)
        real_py = os.path.realpath(venv / "bin" / "python")
        args = [
            bwrap, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid",
            "--unshare-uts", "--cap-drop", "ALL",
            *([] if os.geteuid() == 0 else ["--unshare-user"]),
            *bwrap_mounts(
                workdir_host=str(checkout), objects=[str(d) for d in pack.chain],
                toolchain=[host_prefix(real_py)], env_binds=[(str(venv.parent), True)],
                tmp_size_mb=2048,
            ),
            "--chdir", SANDBOX_WORKDIR, "--", "bash", "--norc", "--noprofile", "-c",
            "set -e\n" + "\n".join([*commands, recipe.install]),
        ]  # fmt: skip
        env = {
            "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
            "VIRTUAL_ENV": str(venv),
            "HOME": "/tmp/home",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            **recipe.env_vars,
            **(env_vars or {}),
        }
        try:
            p = subprocess.run(
                args, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
            )
        except subprocess.TimeoutExpired as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EnvBuildError(f"the install step took over {INSTALL_TIMEOUT:g} s") from e
        with log.open("a") as f:
            f.write(f"$ {recipe.install}\n{p.stdout}{p.stderr}\n")
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EnvBuildError(
                f"the install step `{recipe.install}` failed: {(p.stderr or p.stdout)[-1500:]}"
            )
        return checkout

    return run


__all__ = ["make_runner"]
