#!/usr/bin/env bash
# Test-only reference implementations (run by tools/bootstrap.sh --dev into .venv).
# They are compared against in tests/parity; no service package depends on them.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt)

# rembg: the peer users would otherwise pick for u2netp (tests/parity, tools/bench).
"${pip[@]}" rembg==2.0.86

# InSPyReNet reference: transparent-background's network, imported without its package __init__
# (tests/support/inspyrenet_reference.py). --no-deps: its Remover/GUI dependencies and timm's
# torchvision are not needed by the network, and PyPI's torchvision does not import beside the CPU
# torch. Versions: constraints.txt; kornia and opencv come from requirements-dev.txt.
"${pip[@]}" --no-deps transparent-background timm
