#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info` (the container suite needs one): install Debian's
# docker.io (and docker-compose v1, which checks deploy/compose*.yaml in the tests) when missing,
# start dockerd in the background when it is not running, and wait for it. Idempotent; needs root
# to install or start anything. CI machines start bare: tools/test.sh runs this before pytest.
set -euo pipefail
log=${CRAFTAI_DOCKERD_LOG:-/var/log/craftai-dockerd.log}
wait_seconds=${CRAFTAI_DOCKERD_WAIT:-90}

answers() { docker info >/dev/null 2>&1; }

if answers && command -v docker-compose >/dev/null; then
    echo "== Docker engine $(docker version --format '{{.Server.Version}}') answers"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "engine.sh: no Docker engine answers and installing or starting one needs root" >&2
    exit 1
fi

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing ${missing[*]} (apt-get; log: $log.apt)"
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l \
        apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log.apt" 2>&1; then
        tail -n 30 "$log.apt" >&2
        echo "engine.sh: could not install ${missing[*]}" >&2
        exit 1
    fi
fi

if ! answers; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        echo "== starting docker (systemd)"
        systemctl start docker
    else
        echo "== starting dockerd in the background (log: $log)"
        # setsid: the engine outlives this script and the test run, like a service would.
        setsid nohup dockerd >"$log" 2>&1 </dev/null &
    fi
    for _ in $(seq "$wait_seconds"); do
        answers && break
        sleep 1
    done
fi
if ! answers; then
    echo "engine.sh: the Docker engine did not answer within ${wait_seconds} s; its log ($log):" >&2
    tail -n 40 "$log" >&2 || true
    exit 1
fi
echo "== Docker engine $(docker version --format '{{.Server.Version}}') answers"
