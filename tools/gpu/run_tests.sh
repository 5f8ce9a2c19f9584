#!/usr/bin/env bash
# The GPU-only tests (pytest -m gpu), on the lent GPU machine (tools library: device).
#
#   bash tools/gpu/run_tests.sh [pytest arguments]    # there: python3 3.12, torch with CUDA, no network
#
# That machine has torch, onnxruntime (CPU), timm and opencv but no virtual environment and no
# network: the missing wheels are carried in .whl/ (made here by tools/gpu/wheels.sh), the project's packages are built
# from this checkout into /tmp/site, and the tests start the console scripts installed there.
# .cache/models/u2netp.onnx and .cache/photos/ are carried too (the fixtures are made there).
set -euo pipefail
cd "$(dirname "$0")/../.."
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
export PYTHONPATH=$site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target "$site" \
    ./clients/wire ./clients/python ./services/common ./services/models ./services/catalogue ./services/prepare ./services/infer
# craftai_dev (the fixtures the tests share with the tools) is used from the checkout: its cache is .cache/.
export PYTHONPATH=$site:$PWD/dev/support/src:$PWD CRAFTAI_TEST_BIN=$site/bin PYTHONUNBUFFERED=1
python3 -m pytest -p no:cacheprovider -m gpu -s -v "${@:-tests/gpu}"
