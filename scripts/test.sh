#!/usr/bin/env bash
# Run the test suite: start the services the tests need (a Docker daemon on a private socket,
# the Debian base image), run pytest, stop the daemon.
set -uo pipefail
cd "$(dirname "$0")/.."
docker_env=$(bash .ci/docker-up.sh) || { echo "could not start the Docker daemon"; exit 1; }
eval "$docker_env"
trap 'bash .ci/docker-down.sh' EXIT
python3 -m swe_gym.images base || { echo "building the Docker base image failed"; exit 1; }
python3 -m pytest -q -p no:cacheprovider --durations=25 "$@"
