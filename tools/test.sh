#!/usr/bin/env bash
# The whole test suite, on a fresh machine: install everything it needs, check the code, run
# every suite (unit, integration, parity, containers). GPU-only tests are skipped with a reason.
# Extra arguments go to pytest (e.g. tools/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash tools/bootstrap.sh --dev

echo "== lint and types"
.venv/bin/ruff check .
.venv/bin/ruff format --check services clients tools tests
.venv/bin/mypy services clients/python/src clients/wire/src tools tests

echo "== Docker engine and images (tests/containers; cached under .cache/docker)"
if bash tools/docker/engine.sh; then
    .venv/bin/python -m tools.docker
elif [ "${CRAFTAI_ALLOW_NO_DOCKER:-}" = 1 ]; then
    echo "warning: no Docker engine: the container tests will be skipped (CRAFTAI_ALLOW_NO_DOCKER=1)" >&2
else
    echo "no Docker engine could be started: the container suite must run (CRAFTAI_ALLOW_NO_DOCKER=1 skips it)" >&2
    exit 1
fi

echo "== tests"
set +e
.venv/bin/python -m pytest -p no:cacheprovider --durations=15 "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
echo "== tests finished with exit code $code in $(( $(date +%s) - started )) s"
exit "$code"
