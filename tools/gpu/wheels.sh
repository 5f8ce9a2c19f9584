#!/usr/bin/env bash
# The wheels the GPU machine lacks (python3.12 there, no network), into .whl/ (git-ignored), to be
# carried with every GPU call (tools library: device). Run here, where pip reaches PyPI:
#
#   bash tools/gpu/wheels.sh
#
# What the GPU image already has (torch, torchvision, onnx, onnxruntime, numpy, pillow, httpx,
# pytest, timm, transformers, einops, ...) is not fetched; versions come from constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
target=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .whl)
for n in 5 17 24 27 28 31 34; do target+=(--platform "manylinux_2_${n}_x86_64"); done
target+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
pip=(.venv/bin/python -m pip download --disable-pip-version-check -q -c constraints.txt "${target[@]}")
noise="is ignored: it is neither a file nor a directory"
# The services' own dependencies missing there (or at versions the generated stubs refuse).
"${pip[@]}" grpcio grpcio-status grpcio-health-checking grpcio-reflection googleapis-common-protos protobuf \
    pydantic pydantic-core pydantic-settings python-dotenv annotated-types typing-inspection \
    simplejpeg isal prometheus-client filelock cryptography cffi pycparser 2> >(grep -v "$noise" >&2)
# `craftai web` (the page's gateway, which tools/bench/cutout.py --web times there) and what it
# imports beyond the image's httpx (anyio, h11 and idna there already; fastapi imports
# opentelemetry-api and annotated-doc at its top: "No module named 'opentelemetry'" there, 2026-12-07).
"${pip[@]}" fastapi fastapi-offline starlette uvicorn python-multipart click typing-extensions websockets \
    opentelemetry-api annotated-doc \
    2> >(grep -v "$noise" >&2)
# Test tools and test-only references (transparent-background imports gdown and wget at its top; nobg: BiRefNet's reference network; there, transformers 5.17
# and torchvision are in the image; nobg asks for datasets and loadimg, which the network never imports).
"${pip[@]}" pytest-asyncio transparent-background==1.3.4 gdown beautifulsoup4 soupsieve kornia==0.9.0 kornia-rs==0.2.0 \
    hydra-core==1.3.8 omegaconf==2.3.1 tomli-w nobg==0.3.1 2> >(grep -v "$noise" >&2)
# What transparent-background's Remover imports beyond those (albumentations at the top of its module;
# 2026-12-01 on the GPU machine: "No module named 'albumentations'"), at versions that agree.
"${pip[@]}" easydict albumentations==2.0.8 albucore==0.0.24 stringzilla simsimd 2> >(grep -v "$noise" >&2)
# IS-Net's references (the DIS authors' network, SkyTNT's copy), from which tests/gpu/test_isnet_cuda.py
# makes its stand-ins there (craftai_dev.isnet_fixture; too large to carry made).
"${pip[@]}" dis-inference anime-seg 2> >(grep -v "$noise" >&2)
# py-spy: the sampling profiler tools/gpu/profile_sam.sh runs on the server (one binary, no dependencies).
"${pip[@]}" py-spy==0.4.3 2> >(grep -v "$noise" >&2)
# rembg, the peer beside u2netp in the benchmark, with what it imports that the machine lacks.
"${pip[@]}" rembg==2.0.86 pymatting pooch platformdirs jsonschema jsonschema-specifications referencing rpds-py \
    2> >(grep -v "$noise" >&2)
# Published as sdists only: built here as pure-Python wheels (Meta's sam2 without its CUDA extension;
# wget, which transparent-background imports at the top of its module).
for sdist in sam2==1.1.0 antlr4-python3-runtime==4.9.3 iopath==0.1.10 wget==3.2; do
    name=${sdist%%==*}
    if ! ls .whl/"${name//-/_}"-*.whl >/dev/null 2>&1; then
        SAM2_BUILD_CUDA=0 .venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .whl "$sdist" \
            2> >(grep -v "$noise" >&2)
    fi
done
du -sh .whl
ls .whl
