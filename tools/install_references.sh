#!/usr/bin/env bash
# Test-only reference implementations (run by tools/bootstrap.sh --dev into .venv).
# They are compared against in tests/parity; no service package depends on them.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt)

# SAM 2 reference: Meta's sam2 code (PyPI sdist 1.1.0 == facebookresearch/sam2@2b90b9f), CPU only.
# --no-deps: its setup.py asks for torchvision, which would replace the pinned CPU torch. PyPI's
# torchvision cannot load beside torch 2.13.0+cpu (its _C needs libtorch_cuda), so the parity test
# stands in the three torchvision transforms that SAM2Transforms uses (tests/support/sam_reference.py).
# hydra-core, omegaconf and iopath (imported by sam2 at module level) are pinned in requirements-dev.txt.
SAM2_BUILD_CUDA=0 SAM2_BUILD_ALLOW_ERRORS=0 "${pip[@]}" --no-deps --no-build-isolation sam2==1.1.0
