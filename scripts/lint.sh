#!/usr/bin/env bash
# Lint: ruff's rules and formatting over the repository, then mypy over the packages (swe_gym, envs, agents,
# algos; its settings in pyproject.toml). Any finding fails the run. scripts/test.sh runs it
# before the tests (CI); the same checks run as pre-commit hooks (.pre-commit-config.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== ruff check"
python3 -m ruff check .
echo "== ruff format --check"
python3 -m ruff format --check .
echo "== mypy"
python3 -m mypy
