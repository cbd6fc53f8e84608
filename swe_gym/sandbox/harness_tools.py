"""Copy host programs (``curl``, ``jq``...) into a harness folder for images that lack them.

Task images carry what the tests need, not what a harness needs (the Debian base image has no
``curl`` or ``jq``), and rebuilding every task image for a harness would change the graded
environment. Instead the harness folder (``--agent-mount``, ``/opt/harness`` in the sandbox)
carries its tools: each program goes to ``libexec/``, the shared libraries it loads (``ldd``)
to ``lib/``, except the C library's own, which the image provides, and ``bin/NAME`` runs it
with that ``lib/`` on ``LD_LIBRARY_PATH`` for that program alone (nothing else the harness
starts sees these libraries). It works where the image's C library is as new as the host's
(a Debian bookworm host and the bookworm base image: the same). The local backend needs none
of this: the host's ``/usr`` is visible in its sandboxes.

``python -m swe_gym.sandbox.harness_tools DEST curl jq``
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# The C library's parts: they must come from the image (one loader, one libc per process).
_LIBC = re.compile(
    r"^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libnss_.*)\.so"
)
_WRAPPER = """#!/bin/sh
# Made by swe_gym.sandbox.harness_tools: {name} with its own libraries (see lib/).
d=$(dirname "$0")/..
LD_LIBRARY_PATH="$d/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "$d/libexec/{name}" "$@"
"""


def shared_libraries(executable: str) -> list[str]:
    """Paths of the libraries ``executable`` loads, as ``ldd`` resolves them on this host."""
    out = subprocess.run(
        ["ldd", executable], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    return [m.group(1) for m in re.finditer(r"=>\s+(/\S+)", out)]


def bundle_tools(dest: str | os.PathLike, names: list[str]) -> list[str]:
    """Put ``names`` (found on ``PATH``) into ``dest`` (``bin/``, ``libexec/``, ``lib/``);
    returns the wrappers written. ``FileNotFoundError`` naming a program not found."""
    root = Path(dest)
    for sub in ("bin", "libexec", "lib"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    made = []
    for name in names:
        found = shutil.which(name)
        if found is None:
            raise FileNotFoundError(f"{name!r} is not on this host's PATH; install it first")
        exe = os.path.realpath(found)
        shutil.copy2(exe, root / "libexec" / name)
        for lib in shared_libraries(exe):
            if not _LIBC.match(os.path.basename(lib)):
                shutil.copy2(os.path.realpath(lib), root / "lib" / os.path.basename(lib))
        wrapper = root / "bin" / name
        wrapper.write_text(_WRAPPER.format(name=name))
        wrapper.chmod(0o755)
        made.append(str(wrapper))
    for d, _dirs, files in os.walk(root):  # readable by the sandbox's uid, whatever it is
        os.chmod(d, 0o755)
        for f in files:
            p = os.path.join(d, f)
            os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
    return made


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m swe_gym.sandbox.harness_tools DEST PROGRAM...", file=sys.stderr)
        return 2
    for path in bundle_tools(args[0], args[1:]):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
