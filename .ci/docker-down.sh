#!/usr/bin/env bash
# Stop the daemon that .ci/docker-up.sh started, by its pid file (never by name).
# Containers keep their state on disk; images stay cached in the data root.
set -euo pipefail

SOCK="${SWE_GYM_DOCKER_SOCK:-/var/run/swe-gym-docker.sock}"
PIDFILE="${SWE_GYM_DOCKER_PID:-/var/run/swe-gym-docker.pid}"
WAIT="${SWE_GYM_DOCKER_WAIT:-60}"

if [[ ! -f "$PIDFILE" ]]; then
    echo "docker-down: no pid file at $PIDFILE; nothing to stop" >&2
    exit 0
fi
pid="$(cat "$PIDFILE" 2>/dev/null || true)"
if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
    echo "docker-down: pid file $PIDFILE is stale; removing it" >&2
    rm -f "$PIDFILE"
    exit 0
fi
echo "docker-down: stopping dockerd (pid $pid)" >&2
kill -TERM "$pid"
deadline=$((SECONDS + WAIT))
while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS >= deadline )); then
        echo "docker-down: dockerd (pid $pid) still alive after ${WAIT}s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
    fi
    sleep 0.2
done
rm -f "$PIDFILE" "$SOCK"
echo "docker-down: stopped" >&2
