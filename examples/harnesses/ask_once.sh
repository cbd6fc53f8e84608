#!/bin/bash
# A minimal --agent-cmd harness: ask the model once for a patch, apply it, exit (= submit).
# Runs in the episode's sandbox (cwd /testbed) with bash, curl and jq; the trainer sets
# OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL and SWE_GYM_ISSUE_FILE.
set -euo pipefail
issue=$(cat "$SWE_GYM_ISSUE_FILE")
request=$(jq -n --arg model "$OPENAI_MODEL" --arg issue "$issue" '{
  model: $model,
  messages: [
    {role: "system", content: "Fix the issue. Reply with a unified diff in a ```diff block."},
    {role: "user", content: ("The repository is in /testbed.\n\n" + $issue)}
  ]}')
reply=$(curl -sS --fail-with-body --max-time 600 "$OPENAI_BASE_URL/chat/completions" \
  -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" \
  -d "$request")
text=$(jq -r '.choices[0].message.content // ""' <<<"$reply")
echo "the model replied with ${#text} characters"
# The first ```diff block of the reply, else the whole reply.
patch=$(awk '/^```diff/ {f = 1; next} /^```/ {if (f) exit} f' <<<"$text")
[ -n "$patch" ] || patch=$text
if git apply --whitespace=nowarn - <<<"$patch"; then
  echo "patch applied"
else
  echo "the reply is not a patch that applies" >&2
fi
