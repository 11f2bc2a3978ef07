#!/usr/bin/env bash
# The second call of a GPU session (the first: gpu_session.sh): the demo's releases on the GPU, timed release by
# release, then the demo's fundus evaluation on the GPU and on the same machine's CPU cores, each profiled, so that
# "evaluate is never slower on the GPU than on the CPU" is measured at the demo's 800 images (at gpu_check's 48 it
# holds; on an H100 the demo's took 93.9 s against 80.0 s on a 2-core development machine). Ends inside
# TOTAL_SECONDS (default 570). Results in OUTDIR: demo_metrics.jsonl (each release's seconds), evaluation.jsonl (one
# line per device, with each release's seconds), the profiles and logs.
#   bash benchmarks/gpu_demo_session.sh OUTDIR [TOTAL_SECONDS]
set -u
OUT=${1:?usage: gpu_demo_session.sh OUTDIR [TOTAL_SECONDS]}
TOTAL_S=${2:-570}
# shellcheck source=benchmarks/gpu_budget.sh
source "$(dirname "$0")/gpu_budget.sh"
DEMO=/tmp/medanon-demo
timeout "$(within 200)" python3 -m medanon --device cuda -q demo --out "$DEMO" --no-inception --skip-evaluation \
  > "$OUT/demo.log" 2>&1
cp "$DEMO/metrics.jsonl" "$OUT/demo_metrics.jsonl" 2>/dev/null || true
for dev in cuda cpu; do
  timeout "$(within 180)" python3 benchmarks/evaluation_demo.py --demo "$DEMO" --no-inception --device "$dev" \
    --profile 40 >> "$OUT/evaluation.jsonl" 2> "$OUT/evaluation-$dev.prof"
done
