#!/usr/bin/env bash
# The fairly bench under variants of the SAM route's GPU constants (sed on this copy), one lease:
#   bash tools/gpu/fairly_variants.sh name=GRID_CALL:ENCODER_BATCHES[:SWITCH_MS] ...
# SWITCH_MS, where given, is the server's sys.setswitchinterval in ms (Python's default is 5): a study of
# how long a click's thread waits for the interpreter lock behind other requests' Python work.
set -uo pipefail
cd "$(dirname "$0")/../.."
f=services/infer/src/craftai_infer/routes/sam2_torch.py
init=services/infer/src/craftai_infer/__init__.py
cp $f /tmp/sam2_torch.orig
cp $init /tmp/infer_init.orig
for v in "$@"; do
    name=${v%%=*}; spec=${v#*=}; call=${spec%%:*}; rest=${spec#*:}; enc=${rest%%:*}
    switch=; [ "$rest" != "$enc" ] && switch=${rest#*:}
    cp /tmp/sam2_torch.orig $f
    cp /tmp/infer_init.orig $init
    sed -i "s/^GRID_CALL = .*/GRID_CALL = $call/; s/^ENCODER_BATCHES = .*/ENCODER_BATCHES = $enc/" $f
    [ -n "$switch" ] && printf '\nimport sys\n\nsys.setswitchinterval(%s / 1000)\n' "$switch" >>$init
    grep -n "^GRID_CALL\|^ENCODER_BATCHES" $f
    grep -n "setswitchinterval" $init
    OUT=$OUT/$name STEPS=fairly bash tools/gpu/run_all.sh 2>&1 | tail -4
    python3 - "$OUT/$name" "$name" <<'PY'
import json, sys, tarfile
d = sys.argv[1]
with tarfile.open(d + "/results.tgz") as t:
    j = json.load(t.extractfile("./interactive-gpu.json"))
s = j["server_stages_ms"]
print(sys.argv[2], "click alone p99", j["alone_ms"]["click"]["p99"], "loaded p50/p99", j["loaded_ms"]["click"]["p50"], j["loaded_ms"]["click"]["p99"],
      "ratio %.2f" % j["p99_loaded_over_alone"]["click"], "model p50 %s" % s["loaded"]["click"]["model"]["p50"],
      "bulk", j["bulk_done"], "mem %.3f" % j["memory_after_over_warm"])
PY
done
cp /tmp/sam2_torch.orig $f
cp /tmp/infer_init.orig $init
