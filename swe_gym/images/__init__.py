"""Docker images for tasks: resolve, pull, or build them locally in layers.

Resolution order for a task (``ensure_image``):

1. the row's own image field (``Task.image_name``, from ``docker_image`` / ``image_name``);
2. the published names: SWE-bench ``swebench/sweb.eval.x86_64.<id>`` and SWE-rebench
   ``swerebench/sweb.eval.x86_64.<id>`` (``__`` -> ``_1776_``, lowercased);
3. a local build, in layers like the SWE-bench harness:

   - **base** ``swe-gym/base:<suite>``: a Debian ``debootstrap --variant=minbase`` root with
     python3, pytest, pip, git and patch, imported with ``docker import``. The root tarball is
     cached (``$SWE_GYM_CACHE`` or ``~/.cache/swe_gym``) so a re-import takes
     seconds. The Debian mirror is read from this machine's apt sources, never hardcoded.
   - **environment** ``swe-gym/env:<hash>``: the base plus the environment part of the task's
     ``install_config`` (``python``, ``packages``, ``pip_packages``, ``env_vars``), keyed by a hash
     of that recipe so tasks that share a recipe share the image. A row whose recipe the host's
     interpreter does not meet (``swe_gym.taskenv``: another Python, a pin, an install step; the
     bundled suite never) gets ``swe-gym/env:task-<hash>`` instead: its task environment, built
     on the host, copied in with its interpreter (``swe_gym.taskenv.docker_layers``); its
     instance copies the install step's generated files rather than running it again.
   - **instance** ``swe-gym/testbed.<repo>:<hash>``: the environment plus the repository at
     ``base_commit`` in ``/testbed`` (history after ``base_commit`` is not in the image), then
     ``pre_install`` and ``install`` run there. Keyed by repository, commit and recipe, so
     tasks at the same commit share it.

Pull policies: ``never`` (local images only), ``if-missing`` (local first, then pull),
``always`` (pull first). Pulls retry with backoff on transient errors (timeouts, 429, 5xx);
permanent ones (unknown host, no such image, access denied) fail at once. Builds run with no
network unless ``build_network="host"`` (or ``$SWE_GYM_BUILD_NETWORK=host``) lets pip reach
PyPI; pip requirements the base already satisfies install offline (a no-op).

CLI::

    python -m swe_gym.images base [--suite bookworm] [--tag swe-gym/base:bookworm] [--rebuild]
    python -m swe_gym.images build [--tasks starter] [--ids ID ...] [--pull-policy if-missing]
    python -m swe_gym.images resolve [--tasks starter] [--ids ID ...]

The parts: ``common`` (names, tags, errors, per-tag locks), ``base`` (the base image),
``recipes`` (``install_config`` as Dockerfiles), ``build`` (local builds), ``resolve`` (pulls and
``ensure_image``), ``__main__`` (the CLI).
"""
