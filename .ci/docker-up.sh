#!/usr/bin/env bash
# Start the project's own Docker daemon (idempotent) and print `export DOCKER_HOST=...`.
#
#   eval "$(.ci/docker-up.sh)"      # start (or reuse) it and point the SDK / CLI at it
#
# The daemon runs without a bridge network (containers get only `lo`), on its own socket,
# data root and pid file, so it never touches a system-wide Docker. Override with:
#   SWE_GYM_DOCKER_SOCK   (default /var/run/swe-gym-docker.sock)
#   SWE_GYM_DOCKER_ROOT   (default /var/lib/swe-gym-docker)       data root (images, containers)
#   SWE_GYM_DOCKER_PID    (default /var/run/swe-gym-docker.pid)
#   SWE_GYM_DOCKER_LOG    (default /var/log/swe-gym-dockerd.log)
#   SWE_GYM_DOCKER_WAIT   (default 60)                             seconds to wait until ready
#   SWE_GYM_DOCKER_EXEC_ROOT (unset: dockerd's default)            set it to run a second daemon
#                                                                  (its own containerd) beside one
# Needs root (dockerd does). Progress goes to stderr; stdout carries only the export line.
set -euo pipefail

SOCK="${SWE_GYM_DOCKER_SOCK:-/var/run/swe-gym-docker.sock}"
ROOT="${SWE_GYM_DOCKER_ROOT:-/var/lib/swe-gym-docker}"
PIDFILE="${SWE_GYM_DOCKER_PID:-/var/run/swe-gym-docker.pid}"
LOG="${SWE_GYM_DOCKER_LOG:-/var/log/swe-gym-dockerd.log}"
WAIT="${SWE_GYM_DOCKER_WAIT:-60}"
EXTRA=()
[[ -n "${SWE_GYM_DOCKER_EXEC_ROOT:-}" ]] && EXTRA=(--exec-root "$SWE_GYM_DOCKER_EXEC_ROOT")
HOST="unix://${SOCK}"

ready() {
    # /_ping answers "OK" once the daemon serves its API.
    command -v curl >/dev/null 2>&1 && curl -fsS --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1 && return 0
    DOCKER_HOST="$HOST" timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
    [[ -f "$PIDFILE" ]] || return 1
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

if ! command -v dockerd >/dev/null 2>&1; then
    echo "docker-up: dockerd not found; install it (Debian: apt-get install docker.io)" >&2
    exit 1
fi

if pid="$(running_pid)"; then
    echo "docker-up: dockerd already running (pid $pid)" >&2
else
    mkdir -p "$ROOT" "$(dirname "$PIDFILE")" "$(dirname "$LOG")" "$(dirname "$SOCK")"
    # A stale pid file or socket from a killed daemon would make dockerd refuse to start.
    rm -f "$PIDFILE" "$SOCK"
    echo "docker-up: starting dockerd on $HOST (data root $ROOT, log $LOG)" >&2
    # setsid: the daemon outlives this shell and the test process that may have called us.
    setsid dockerd --host "$HOST" --bridge=none --iptables=false --ip-forward=false \
        --data-root "$ROOT" --pidfile "$PIDFILE" "${EXTRA[@]}" >>"$LOG" 2>&1 </dev/null &
fi

deadline=$((SECONDS + WAIT))
until ready; do
    if (( SECONDS >= deadline )); then
        echo "docker-up: dockerd did not become ready within ${WAIT}s; last log lines:" >&2
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.2
done
echo "docker-up: ready at $HOST" >&2
echo "export DOCKER_HOST=$HOST"
