#!/usr/bin/env bash
# Create .venv and install the seven packages (editable) with their pinned dependencies.
#   tools/bootstrap.sh          what the services and the craftai command need
#   tools/bootstrap.sh --dev    also the test tools, the test-only references and the opt-in
#                               OpenVINO engine (craftai-infer[openvino]), which the tests cover
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1
python=${CRAFTAI_PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
# `install`: uv (or pip) with constraints.txt, no byte-compiling: compileall does it once at the
# end on every core (about half the time on two).
source tools/installer.sh
# The tests also cover the opt-in OpenVINO engine of u2netp (craftai-infer[openvino], ~180 MB): --dev only.
infer_extras=onnx-cpu,torch
[ "$dev" = 1 ] && infer_extras=$infer_extras,openvino
echo "== installing the craft-ai packages"
install -e clients/wire -e "clients/python[web,video]" -e services/common -e services/models -e services/catalogue \
    -e "services/prepare[convert]" -e "services/infer[$infer_extras]"
if [ "$dev" = 1 ]; then
    # The page's tests drive Debian's chromium (tests/web) with Playwright for Python; Playwright's own
    # browser is never downloaded. chromium-driver comes beside it for Selenium users of the same browser.
    if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
        echo "== installing chromium and chromium-driver (the browser of the page's tests)"
        sudo=()
        [ "$(id -u)" = 0 ] || sudo=(sudo -n)
        if command -v apt-get >/dev/null && { [ ${#sudo[@]} = 0 ] || sudo -n true 2>/dev/null; }; then
            "${sudo[@]}" apt-get update -qq
            DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
                chromium chromium-driver >/dev/null
        elif ! command -v chromium >/dev/null; then
            echo "chromium is missing and apt-get cannot run here: install Debian's chromium and" \
                "chromium-driver (apt-get install chromium chromium-driver) for tests/web" >&2
            exit 1
        fi
    fi
    echo "== installing the test tools"
    install -r requirements-dev.txt
    # What the tests and the tools share (fixtures, references, sample files): docs/ARCHITECTURE.md.
    install -e dev/support
    echo "== installing the test-only reference implementations"
    bash tools/install_references.sh
fi
# Files that do not compile (a library's Python 2 examples) are skipped, as pip skips them.
.venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true
echo "== .venv ready"
