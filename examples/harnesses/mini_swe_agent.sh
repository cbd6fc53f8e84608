#!/bin/bash
# mini-swe-agent's own command line (`mini`, github.com/SWE-agent/mini-swe-agent, 2.4.6) as an
# --agent-cmd harness: its prompts and loop (mini_textbased.yaml: one ```mswea_bash_command
# block per reply), its litellm model pointed at the trainer's endpoint, its local environment
# running each command in /testbed. It exits when the model runs
# `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, at its step limit or after 3 format errors in a
# row; any exit submits the working copy. `mini` must be on PATH in the sandbox (see
# examples/README.md); MINI_STEP_LIMIT (default 30) caps its model calls.
set -euo pipefail
command -v mini >/dev/null || {
  echo "mini (pip install mini-swe-agent) is not on PATH in the sandbox: $PATH" >&2
  exit 127
}
state=$(mktemp -d)  # its config dir and trajectory, in the sandbox's /tmp
# Never the user's ~/.config/mini-swe-agent/.env (keys, default model), and no first-run setup.
export MSWEA_GLOBAL_CONFIG_DIR=$state MSWEA_CONFIGURED=true MSWEA_SILENT_STARTUP=1
export MSWEA_COST_TRACKING=ignore_errors  # litellm has no price for the policy: cost 0
export LITELLM_LOCAL_MODEL_COST_MAP=True  # no fetch of litellm's price list (no network here)
export NO_COLOR=1  # plain text in the episode's saved stdout
# Errors of a local endpoint do not heal by waiting (its retry waits 4-60 s, 10 times).
export MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=${MINI_RETRIES:-1}
task=${SWE_GYM_ISSUE:-$(cat "$SWE_GYM_ISSUE_FILE")}
cd "$state"  # it looks configs up in the cwd first: never in the repository under test
exec mini --yolo --exit-immediately --cost-limit 0 --model "openai/$OPENAI_MODEL" \
  -c mini_textbased.yaml -c model.model_class=litellm_textbased \
  -c "model.model_kwargs.api_base=$OPENAI_BASE_URL" \
  -c "agent.step_limit=${MINI_STEP_LIMIT:-30}" -c environment.cwd=/testbed \
  --output "$state/trajectory.json" --task="$task"
