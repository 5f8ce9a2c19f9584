#!/usr/bin/env bash
# The main job, on a fresh machine: install everything into .venv, start the services
# (`craftai serve`), set up u2netp (downloaded and checked byte for byte), remove the background
# of four public-domain photos, write the mattes and cutouts to out/quickstart/, print timings.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash tools/bootstrap.sh
craftai=.venv/bin/craftai
out=out/quickstart
mkdir -p "$out"

echo "== sample photos (public domain, from the scikit-image wheel)"
PYTHONPATH=dev/support/src .venv/bin/python -m craftai_dev.samples "$out/photos" >/dev/null
ls "$out/photos"

echo "== starting the services (craftai serve; store: ${CRAFTAI_STORE:-~/.cache/craftai})"
ready=$(mktemp)
rm -f "$ready"
CRAFTAI_PORT=${CRAFTAI_PORT:-0} CRAFTAI_READY_FILE="$ready" "$craftai" serve >"$out/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$ready"' EXIT
for _ in $(seq 1 600); do
    [ -s "$ready" ] && break
    kill -0 $server 2>/dev/null || { cat "$out/serve.log"; echo "the services did not start" >&2; exit 1; }
    sleep 0.1
done
[ -s "$ready" ] || { cat "$out/serve.log"; echo "the services did not start within 60 s" >&2; exit 1; }
export CRAFTAI_ADDRESS=$(cat "$ready")
echo "   serving on $CRAFTAI_ADDRESS"

echo "== setting up image.matte with u2netp"
"$craftai" setup image.matte --recipe u2netp

echo "== removing the backgrounds"
"$craftai" remove-background "$out"/photos/* -o "$out" --outputs matte,cutout

echo "== status"
"$craftai" status image.matte
echo "== done in $(( $(date +%s) - started )) s: mattes and cutouts in $out/"
