#!/usr/bin/env bash
# The fairly bench under variants of the SAM route's GPU constants (sed on this copy), one lease:
#   bash tools/gpu/fairly_variants.sh 'name=CONST=value;CONST=value' ...
# CONST is a constant of routes/sam2_torch.py (GRID_CALL, ENCODER_BATCHES), SWITCH_MS (the
# server's sys.setswitchinterval in ms; Python's default is 5), or ARGS (the bench's own arguments,
# e.g. 'ARGS=--gpus 0 --replicas-per-gpu 2'; @uuid0 stands for GPU 0's UUID). Each variant's summary line, with
# the SAM route's model calls and the interactive jobs' queue waits, is printed as soon as it ends.
set -uo pipefail
cd "$(dirname "$0")/../.."
f=services/infer/src/craftai_infer/routes/sam2_torch.py
init=services/infer/src/craftai_infer/__init__.py
cp $f /tmp/sam2_torch.orig
cp $init /tmp/infer_init.orig
for v in "$@"; do
    name=${v%%=*}; spec=${v#*=}
    cp /tmp/sam2_torch.orig $f
    cp /tmp/infer_init.orig $init
    unset FAIRLY_ARGS
    IFS=';' read -ra settings <<<"$spec"
    for setting in "${settings[@]}"; do
        [ -z "$setting" ] && continue
        key=${setting%%=*}; value=${setting#*=}
        case $key in
            ARGS) export FAIRLY_ARGS="${value//@uuid0/$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)}" ;;
            SWITCH_MS) printf '\nimport sys\n\nsys.setswitchinterval(%s / 1000)\n' "$value" >>$init ;;
            *) sed -i "s/^$key = .*/$key = $value/" $f ;;
        esac
    done
    echo "== $name: $(grep -h "^GRID_CALL\|^ENCODER_BATCHES" $f | tr '\n' ' ') ${FAIRLY_ARGS:-}"
    OUT=$OUT/$name STEPS=fairly bash tools/gpu/run_all.sh 2>&1 | tail -4
    python3 - "$OUT/$name" "$name" <<'PY'
import json, sys, tarfile
d = sys.argv[1]
with tarfile.open(d + "/results.tgz") as t:
    j = json.load(t.extractfile("./interactive-gpu.json"))
s = j["server_stages_ms"]
print(sys.argv[2], "click alone p99", j["alone_ms"]["click"]["p99"], "loaded p50/p99", j["loaded_ms"]["click"]["p50"], j["loaded_ms"]["click"]["p99"],
      "ratio %.2f" % j["p99_loaded_over_alone"]["click"], "model p50/p99 %s/%s" % (s["loaded"]["click"]["model"]["p50"], s["loaded"]["click"]["model"]["p99"]),
      "bulk", j["bulk_done"], "mem %.3f" % j["memory_after_over_warm"])
calls = j.get("model_calls", {})
for key, c in sorted(calls.get("calls", {}).items()):
    if "sam2" in key or "pictures" in key:
        u = c["under_ms"]
        print("   ", key, "n", int(c["count"]), "mean %.1f ms" % c["mean_ms"], "under 5/10/25/50 ms:", *(u.get(b) for b in ("5.0", "10.0", "25.0", "50.0")))
PY
done
cp /tmp/sam2_torch.orig $f
cp /tmp/infer_init.orig $init
