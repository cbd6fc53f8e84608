#!/usr/bin/env bash
# Lint: ruff's rules and formatting over the repository, mypy over the packages (swe_gym, envs, agents,
# algos; its settings in pyproject.toml), then the layering (no module imports a layer above its own;
# the layers are written in ARCHITECTURE.md, "## Layers"). Any finding fails the run. scripts/test.sh runs it
# before the tests (CI); the same checks run as pre-commit hooks (.pre-commit-config.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== ruff check"
python3 -m ruff check .
echo "== ruff format --check"
python3 -m ruff format --check .
echo "== mypy"
python3 -m mypy
echo "== layers"
python3 scripts/check_layers.py
