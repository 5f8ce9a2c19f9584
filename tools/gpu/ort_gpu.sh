#!/usr/bin/env bash
# onnxruntime with its CUDA provider on the GPU machine, for rembg's own sessions beside ours on the
# GPU (tools/bench/rembg_recipes.py --device cuda). The machine's image has onnxruntime for the CPU
# only and no network; the CUDA build's wheel (onnxruntime-gpu, built for CUDA 13 as the image's torch
# is, its CUDA libraries the nvidia-* packages the image has) is ~244 MiB, over the 64 MiB a device
# call carries. So it travels in parts, one a call, on calls made back to back (the machine stays
# warm between them and keeps /tmp), and is put together and checked there:
#
#   bash tools/gpu/ort_gpu.sh split              # here: .ortgpu/part-1 ... part-N and wheel.sha256
#   bash tools/gpu/ort_gpu.sh receive K          # there, one call a part, carry [".ortgpu/part-K", ".ortgpu/wheel.sha256"]
#   bash tools/gpu/ort_gpu.sh install            # there: the parts joined, checked, installed in /tmp/ortgpu
#   eval "$(bash tools/gpu/ort_gpu.sh env)"      # there: PYTHONPATH and LD_LIBRARY_PATH for it
#
# /tmp/ortgpu is put first on PYTHONPATH only for the commands that need it (its `onnxruntime`
# shadows the image's CPU build, for our onnxruntime routes as well as rembg's).
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=1.31.1
WHEEL=onnxruntime_gpu-$VERSION-cp312-cp312-manylinux_2_28_x86_64.whl
PART_BYTES=$((50 * 1024 * 1024))  # with the ~6 MB working tree: under the 64 MiB a call carries
parts=/tmp/ortgpu-parts
target=/tmp/ortgpu

case "${1:-}" in
split)
    mkdir -p .ortgpu
    if [ ! -f ".ortgpu/$WHEEL" ]; then
        .venv/bin/python -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
            --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
            -d .ortgpu "onnxruntime-gpu==$VERSION"
    fi
    rm -f .ortgpu/part-*
    split -b "$PART_BYTES" -d -a 1 --numeric-suffixes=1 ".ortgpu/$WHEEL" .ortgpu/part-
    (cd .ortgpu && sha256sum "$WHEEL" >wheel.sha256)
    ls -l .ortgpu
    echo "carry .ortgpu/part-K and .ortgpu/wheel.sha256 in one call each: K = $(cd .ortgpu && ls part-* | sed 's/part-//' | tr '\n' ' ')"
    ;;
receive)
    k=${2:?which part}
    mkdir -p "$parts"
    cp ".ortgpu/part-$k" "$parts/"
    cp .ortgpu/wheel.sha256 "$parts/"
    ls -l "$parts"
    ;;
install)
    [ -f "$parts/wheel.sha256" ] || { echo "no parts received (receive K first, on this warm machine)" >&2; exit 1; }
    cat "$parts"/part-* >"$parts/$WHEEL"
    (cd "$parts" && sha256sum -c wheel.sha256) || { echo "the parts do not make the wheel: a part is missing or damaged" >&2; exit 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" "$parts/$WHEEL"
    rm -f "$parts/$WHEEL"
    echo "installed in $target"
    ;;
env)
    # the CUDA libraries the provider loads (cudart, cublas, cufft, curand, cudnn, nvrtc): the image's nvidia-* packages
    libs=$(python3 -c 'import glob, os, site; dirs = {os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(os.path.join(s, "nvidia", "**", "lib*.so*"), recursive=True)}; print(":".join(sorted(dirs)))')
    echo "export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH} LD_LIBRARY_PATH=$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    ;;
*)
    echo "usage: ort_gpu.sh split | receive K | install | env" >&2
    exit 2
    ;;
esac
