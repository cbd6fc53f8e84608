#!/usr/bin/env bash
# Run the test suite: start the services the tests need (a Docker daemon on a private socket,
# the Debian base image), run the linters (scripts/lint.sh: ruff check, mypy, layers; a finding fails the
# run), run pytest, stop the daemon. Every test, slow ones included (CI).
#   --fast: the fast lane instead: no Docker, -m "not slow and not docker and not vllm and not gpu",
#           spread over pytest-xdist workers (SWE_GYM_TEST_WORKERS, default the cores + 1, each
#           with one torch thread): under 3 minutes on 2 cores. Other arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
args=()
fast=0
for a in "$@"; do
    if [ "$a" = "--fast" ]; then fast=1; else args+=("$a"); fi
done
if [ "$fast" = 1 ]; then
    # one torch thread per worker; one worker more than the cores, since many tests spend
    # their time waiting on a subprocess or a timeout (2 cores: 163 s with 3 workers, 190 s
    # with 2)
    OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" exec python3 -m pytest -q -p no:cacheprovider \
        --durations=25 -n "${SWE_GYM_TEST_WORKERS:-$(($(nproc) + 1))}" --dist worksteal \
        -m "not slow and not docker and not vllm and not gpu" "${args[@]}"
fi
bash scripts/lint.sh || { echo "lint failed (ruff check, mypy, layers): see above"; exit 1; }
docker_env=$(bash .ci/docker-up.sh) || { echo "could not start the Docker daemon"; exit 1; }
eval "$docker_env"
trap 'bash .ci/docker-down.sh' EXIT
python3 -m swe_gym.images base || { echo "building the Docker base image failed"; exit 1; }
python3 -m pytest -q -p no:cacheprovider --durations=25 "${args[@]}"
