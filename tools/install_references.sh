#!/usr/bin/env bash
# Test-only reference implementations (run by tools/bootstrap.sh --dev into .venv).
# They are compared against in tests/parity; no service package depends on them.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt)

# rembg: the peer users would otherwise pick for u2netp (tests/parity, tools/bench).
"${pip[@]}" rembg==2.0.86
