#!/usr/bin/env bash
# The whole test suite, on a fresh machine: install everything it needs, check the code, run
# every suite (unit, integration, parity, bench, containers). GPU-only tests are skipped with a reason.
# Extra arguments go to pytest (e.g. tools/test.sh tests/unit -x).
#
# CI machines have 2 cores and much of the work waits (apt-get and pip on the network and disks,
# services starting, Docker builds), so stages overlap where nothing is shared:
#   - the Docker engine is installed and started (tools/docker/engine.sh) beside the bootstrap;
#   - the image builds (python -m tools.docker) go on beside the lint and the tests: the container
#     suite waits for them (CRAFTAI_DOCKER_STAGE_DONE, tests/containers/conftest.py);
#   - mypy runs beside the tests (ruff first: a lint error stops the run before them);
#   - pytest runs on two workers (pytest-xdist, one test module per unit of work: tests/conftest.py).
# Each background stage writes a log that is printed when it is waited for; any failure fails the run.
# CRAFTAI_TEST_WORKERS=0 runs pytest in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
# Some tests run a service as another user (setpriv): it must be able to pass through the checkout
# to reach .venv, which a clone into a folder from `mktemp -d` (mode 0700) does not allow.
chmod o+x . 2>/dev/null || true
started=$(date +%s)
# OpenMP threads sleep when they wait instead of spinning (tests/conftest.py says why)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
logs=$(mktemp -d -t craftai-test-XXXXXX)
timings=()
since() { echo $(($(date +%s) - $1)); }
# A background stage waited for: its log printed under its name, its time kept; its exit code returned.
waited() {  # name, pid, log, started
    local code=0
    wait "$2" || code=$?
    echo "== $1"
    cat "$3"
    timings+=("$1 $(since "$4") s")
    return "$code"
}

# -- the Docker engine, beside the bootstrap
engine_started=$(date +%s)
bash tools/docker/engine.sh >"$logs/engine.log" 2>&1 &
engine_pid=$!

bootstrap_started=$(date +%s)
bash tools/bootstrap.sh --dev
timings+=("bootstrap $(since "$bootstrap_started") s")

docker_ok=1
if wait "$engine_pid"; then
    cat "$logs/engine.log"
else
    cat "$logs/engine.log"
    if [ "${CRAFTAI_ALLOW_NO_DOCKER:-}" = 1 ]; then
        echo "warning: no Docker engine: the container tests will be skipped (CRAFTAI_ALLOW_NO_DOCKER=1)" >&2
        docker_ok=0
    else
        echo "no Docker engine could be started: the container suite must run (CRAFTAI_ALLOW_NO_DOCKER=1 skips it)" >&2
        exit 1
    fi
fi
timings+=("Docker engine $(since "$engine_started") s (beside the bootstrap)")

# -- the images, beside mypy and the tests
export CRAFTAI_DOCKER_STAGE_DONE="$logs/docker.done"
images_started=$(date +%s)
if [ "$docker_ok" = 1 ]; then
    # its own process group (setsid), so that an early exit of this script stops the builds too
    setsid bash -c '.venv/bin/python -m tools.docker >"$1" 2>&1; code=$?; echo "$code" >"$2"; exit "$code"' \
        images "$logs/images.log" "$CRAFTAI_DOCKER_STAGE_DONE" &
    images_pid=$!
else
    echo skipped >"$CRAFTAI_DOCKER_STAGE_DONE"
    images_pid=
fi
stop_images() { [ -z "$images_pid" ] || kill -- -"$images_pid" 2>/dev/null || true; }
trap stop_images EXIT
wait_for_images() {
    [ -n "$images_pid" ] || return 0
    local pid=$images_pid
    images_pid=
    waited "Docker images (built beside the checks and the tests)" "$pid" "$logs/images.log" "$images_started"
}

echo "== lint"
checks_started=$(date +%s)
.venv/bin/ruff check .
.venv/bin/ruff format --check services clients dev tools tests
timings+=("lint $(since "$checks_started") s")

# -- the types, beside the tests (their log is printed when waited for; a failure fails the run)
types_started=$(date +%s)
.venv/bin/mypy services clients/python/src clients/wire/src dev/support/src tools tests >"$logs/types.log" 2>&1 &
types_pid=$!
trap 'stop_images; [ -z "${types_pid:-}" ] || kill "$types_pid" 2>/dev/null || true' EXIT
wait_for_types() {
    local pid=$types_pid
    types_pid=
    waited "types (mypy, beside the tests)" "$pid" "$logs/types.log" "$types_started"
}

echo "== tests"
workers=${CRAFTAI_TEST_WORKERS:-2}
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
tests_started=$(date +%s)
set +e
.venv/bin/python -m pytest -p no:cacheprovider --durations=15 "${parallel[@]}" "$@"
code=$?
set -e
timings+=("tests $(since "$tests_started") s")
if ! wait_for_types; then
    echo "the type check failed (above)" >&2
    [ "$code" -eq 0 ] && code=1
fi
if ! wait_for_images; then
    echo "building the Docker images failed (above)" >&2
    [ "$code" -eq 0 ] && code=1
fi
rm -rf "$logs"
echo "== stages: $(IFS=';'; echo "${timings[*]}" | sed 's/;/; /g')"
if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
echo "== tests finished with exit code $code in $(since "$started") s"
exit "$code"
