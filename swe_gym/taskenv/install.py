"""The recipe's install step, run once per environment in a bubblewrap sandbox.

The working copy of the install commit (the row's base commit) is at ``/testbed`` (as in
every task sandbox, so an editable install's paths stay right there), the environment's
directory is writable at its host path, the interpreter's prefix read-only; PyPI is reachable (build dependencies), the
host's home, caches and this project are not. The build's constraints file
(``swe_gym.taskenv.seeds``) reaches pip through ``PIP_CONSTRAINT`` and ``PIP_BUILD_CONSTRAINT``;
when pip finds them in conflict with what the project asks for (a ``setuptools>=64`` newer
than the date), the step runs once more without them and the log says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from swe_gym.errors import SandboxError
from swe_gym.sandbox.mounts import SANDBOX_WORKDIR, bwrap_mounts
from swe_gym.sandbox.objects import base_pack, init_repo
from swe_gym.taskenv.build import INSTALL_TIMEOUT, EnvBuildError
from swe_gym.taskenv.pythons import host_prefix
from swe_gym.taskenv.recipe import Recipe

# How this machine reaches its package index (a proxy, a private CA, a mirror): the install
# step's pip needs the same (build dependencies come from the index).
_INDEX_VARS = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_DEFAULT_TIMEOUT",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY",
    "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)  # fmt: skip
# pip's words for a requirement its constraints rule out (old and new resolvers)
_CONFLICT = re.compile(r"conflict|ResolutionImpossible|Could not find a version that satisfies")
_SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"  # in the sandbox's /etc copy too


def _index_settings() -> dict[str, str]:
    out = {k: os.environ[k] for k in _INDEX_VARS if os.environ.get(k)}
    if os.path.isfile(_SYSTEM_CA):  # the system's trust store, not pip's bundled one
        out.setdefault("PIP_CERT", _SYSTEM_CA)
        out.setdefault("SSL_CERT_FILE", _SYSTEM_CA)
    return out


def make_runner(repo_name: str, repo: Path, env_vars: dict[str, str] | None = None):  # noqa: ANN201
    """A ``runner(recipe, commands, venv, log, constraints) -> checkout`` for ``build.ensure``."""

    def run(
        recipe: Recipe, commands: list[str], venv: Path, log: Path, constraints: Path | None = None
    ) -> Path:
        checkout = _run_once(recipe, commands, venv, log, constraints)
        if isinstance(checkout, Path):
            return checkout
        if constraints is not None and _CONFLICT.search(checkout):
            with log.open("a") as f:
                f.write("build constraints conflict with the project's; again without them\n")
            checkout = _run_once(recipe, commands, venv, log, None)
            if isinstance(checkout, Path):
                return checkout
        raise EnvBuildError(f"the install step `{recipe.install}` failed: {checkout[-1500:]}")

    def _run_once(
        recipe: Recipe, commands: list[str], venv: Path, log: Path, constraints: Path | None
    ) -> Path | str:
        """The checkout, or the failed step's output."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise EnvBuildError("the install step needs bubblewrap (apt-get install bubblewrap)")
        at = recipe.install_rev
        try:
            pack = base_pack(repo_name, repo, at)
        except SandboxError as e:
            raise EnvBuildError(
                f"the install step's commit {at[:12]} cannot be read from the clone {repo}: {e}"
            ) from None
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
            **_index_settings(),
            "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
            "VIRTUAL_ENV": str(venv),
            "HOME": "/tmp/home",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            **(
                {"PIP_CONSTRAINT": str(constraints), "PIP_BUILD_CONSTRAINT": str(constraints)}
                if constraints is not None
                else {}
            ),
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
            return (p.stderr or p.stdout) or f"exit {p.returncode}"
        return checkout

    return run


__all__ = ["make_runner"]
