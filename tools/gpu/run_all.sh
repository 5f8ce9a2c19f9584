#!/usr/bin/env bash
# Every GPU check and figure in one lease of the GPU machine (tools library: device).
#
#   bash tools/gpu/run_all.sh            # there: python3 3.12, torch with CUDA, no network
#
# Carried (ignored paths, named in the call's carry list): .whl/ (wheels missing there: made here by
# tools/gpu/wheels.sh; see
# docs/PERFORMANCE.md), .cache/models/u2netp.onnx and .cache/photos/. Results go to $OUT (or out/gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-out/gpu}
mkdir -p "$out"
steps=${STEPS:-env,u2netp,sam,sam_predictor,amg,inspyrenet,matte,outputs,birefnet,birefnet_hr,birefnet_general,birefnet_dynamic,bench,foreground,fairly,cutout,cutout_steps,frames,frames_raw,frames_inspyrenet,frames_birefnet,fairly_video,fairly_video_apart}

wheels=$(ls .whl/*.whl 2>/dev/null || true)
if [ -n "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
        || { echo "wheel install failed" >&2; exit 1; }
fi
# the checkout's packages before /tmp/site: run_tests.sh installs them there too, and a copy left from
# it on a warm machine would shadow this tree's edits (fairly_variants.sh's among them)
export PYTHONPATH=$PWD/clients/wire/src:$PWD/clients/python/src:$PWD/services/common/src:$PWD/services/models/src:$PWD/services/catalogue/src:$PWD/services/prepare/src:$PWD/services/infer/src:$PWD/dev/support/src:$PWD:/tmp/site
export PYTHONUNBUFFERED=1

run() {  # name, timeout seconds, command...
    local name=$1 limit=$2
    shift 2
    case ",$steps," in *",$name,"*) ;; *) return 0 ;; esac
    echo "== $name"
    local started=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local code=$?
    echo "   exit $code in $(( $(date +%s) - started )) s"
    tail -n 25 "$out/$name.log"
}

run env 60 bash -c 'nvidia-smi; python3 -c "import torch, onnxruntime, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0)); print(onnxruntime.__version__, onnxruntime.get_available_providers())"; ls /dev/nvidia* /proc/driver/nvidia 2>&1 | head'
run u2netp 240 python3 -m tools.gpu.u2netp_check .cache/models/u2netp.onnx --photos .cache/photos/chelsea.png .cache/photos/astronaut.png
run sam 420 bash -c 'python3 -m craftai_dev.sam21 --json > '"$out"'/fixture.json && f=$(python3 -c "import json;print(json.load(open(\"'"$out"'/fixture.json\"))[\"folder\"])") && python3 -m tools.gpu.sam2_check --encoder $f/encoder.onnx --decoder $f/decoder.onnx --json '"$out"'/sam2_check.json'
run sam_predictor 300 python3 -m tools.bench.sam_gpu --out "$out"
run amg 420 python3 -m tools.bench.amg_gpu --out "$out"
run inspyrenet 420 python3 -m tools.gpu.inspyrenet_check
run matte 420 python3 -m tools.bench.matte_gpu --out "$out"
run outputs 420 python3 -m tools.bench.run --sections matte_outputs --out "$out/outputs"
run birefnet 240 python3 -m tools.gpu.birefnet_check --out "$out"
run birefnet_hr 300 python3 -m tools.gpu.birefnet_hr_check --out "$out"
run birefnet_general 300 python3 -m tools.gpu.birefnet_general_check --out "$out"
run birefnet_dynamic 300 python3 -m tools.gpu.birefnet_dynamic_check --out "$out"
run bench 580 python3 -m tools.bench.run --out "$out/bench"
run fusion 420 python3 -m tools.gpu.decoder_fusion --out "$out/fusion" --budget 300 --only "${FUSION_ONLY:-}"
run jpeg 180 python3 -m tools.gpu.jpeg_decode --out "$out/jpeg"
# The cutout's foreground colours on CUDA: pymatting's raster order (wavefront) against the red-black sweep.
run foreground 400 python3 -m tools.gpu.foreground_order --out "$out/foreground"
# The SAM encoder at concurrency 32 through one server process, and through 2 and 4 on the one GPU.
run sam_load 480 bash -c 'for r in '"${SAM_REPLICAS:-1 2 4}"'; do python3 -m tools.gpu.sam_throughput --replicas $r --out '"$out"'/sam_load/r$r || exit; done'
# Shared fairly: a click loop beside 8 segment-everything callers and 32 encoders (target: p99 <= 3x alone).
# FAIRLY_ROUNDS: the click loop's rounds alone and loaded (a p99 of 30 is the slowest round or two).
run fairly 300 python3 -m tools.bench.interactive --device cuda --encoders 32 --everything 8 --large 0 \
    --rounds "${FAIRLY_ROUNDS:-30}" --settle 15 --json "$out/interactive-gpu.json" ${FAIRLY_ARGS:-}
# Fixing a cutout: keep clicks on a 2048x1536 cutout session, through gRPC and through the web gateway.
run cutout 420 python3 -m tools.bench.cutout --device cuda --web --out "$out/cutout.json"
# The same refinement's merge step by step (copies, feathering, colours, outputs), for three region sizes.
run cutout_steps 240 python3 -m tools.gpu.cutout_steps --device cuda --out "$out/cutout_steps"
# A video's frames through one MatteFrames stream: u2netp on torch, 1080p raw frames (rembg: CPU only, not here).
run frames 300 python3 -m tools.bench.frames --device cuda --size 1920x1080 --frames 120 --in-flight 16 --no-rembg --stabilize 0.8 \
    --out "$out/frames.json"
# The same frames answered as raw pixels (no PNG encoded per frame).
run frames_raw 300 python3 -m tools.bench.frames --device cuda --size 1920x1080 --frames 120 --in-flight 16 --no-rembg --format raw \
    --out "$out/frames-raw.json"
# InSPyReNet's and BiRefNet_lite's stand-ins through one stream; InSPyReNet beside transparent-background's video loop.
run frames_inspyrenet 400 python3 -m tools.bench.frames --device cuda --recipe inspyrenet-swinb --transparent-background \
    --size 1920x1080 --frames 60 --in-flight 16 --out "$out/frames-inspyrenet.json"
run frames_birefnet 300 python3 -m tools.bench.frames --device cuda --recipe birefnet-lite --size 1920x1080 --frames 60 \
    --in-flight 16 --format raw --out "$out/frames-birefnet.json"
# A click beside one 1080p video stream (target: p99 <= 3x alone).
run fairly_video 300 python3 -m tools.bench.interactive --device cuda --encoders 0 --everything 0 --large 0 --videos 1 \
    --rounds "${FAIRLY_ROUNDS:-30}" --settle 5 --json "$out/interactive-video-gpu.json"
# The same with the interactive apps on an infer process of their own (docs/DEPLOY.md), the video on a second.
run fairly_video_apart 300 python3 -m tools.bench.interactive --device cuda --encoders 0 --everything 0 --large 0 --videos 1 \
    --gpus 0 --replicas-per-gpu 2 --apart --rounds "${FAIRLY_ROUNDS:-30}" --settle 5 --json "$out/interactive-video-gpu-apart.json"
# rembg's recipes against rembg's own sessions on onnxruntime's CUDA provider (not in the default steps:
# onnxruntime-gpu must first be brought in parts on calls back to back: tools/gpu/ort_gpu.sh), ours on
# onnxruntime and torch. u2net_human_seg's stand-in is U²-Net (u2net's own file cannot be fetched there).
run rembg_recipes_gpu 580 bash -c 'eval "$(bash tools/gpu/ort_gpu.sh env)" && python3 -m tools.bench.rembg_recipes --device cuda --torch \
    --recipes "${REMBG_RECIPES:-u2net_human_seg,isnet-general-use,isnet-anime,birefnet-general}" --out '"$out"'/rembg_recipes'
# Two GPUs (not in the default steps: a machine of two GPUs): one replica against two, and a failover.
run two_gpus 600 python3 -m tools.gpu.two_gpus --out "$out"
# The device tool brings back at most 8 files: on that machine ($OUT set), everything in one archive.
if [ -n "${OUT:-}" ]; then
    tar czf /tmp/results.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/results.tgz "$out/results.tgz"
fi
echo "== done"
