"""The toolkit's one cache root, shared by every part that keeps files between runs."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SWE_GYM_CACHE"


def cache_root() -> Path:
    """``$SWE_GYM_CACHE``, else ``~/.cache/swe_gym``: repositories, images, models, packs.

    Never the current directory or the source checkout: a cache there ends up in commits,
    in Docker build contexts and inside a sandbox that binds the checkout."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "swe_gym").expanduser()


__all__ = ["CACHE_ENV", "cache_root"]
