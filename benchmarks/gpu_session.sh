#!/usr/bin/env bash
# Everything a lent GPU machine should run, in one call (about 7-9 minutes on one H100; keep it under the
# 10-minute limit of one device call): every command (gpu_check.py, at most CHECK_SECONDS), the demo end to end,
# then the throughput benchmarks at 256 px and clustering up to N = 377,110 (at most 120 s) (no Inception weights are needed:
# FID/KID are left out with --no-inception). Results land in OUTDIR as JSON lines and logs.
#   bash benchmarks/gpu_session.sh OUTDIR [DEMO_SECONDS] [CHECK_SECONDS]
set -u
OUT=${1:?usage: gpu_session.sh OUTDIR [DEMO_SECONDS] [CHECK_SECONDS]}
DEMO_S=${2:-180}
CHECK_S=${3:-300}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
timeout "$CHECK_S" python3 benchmarks/gpu_check.py --work /tmp/medanon-gc --jsonl "$OUT/gpu_check.jsonl" \
  > "$OUT/gpu_check.out" 2>&1
tar czf "$OUT/gpu_check_logs.tgz" -C /tmp/medanon-gc logs
start=$(date +%s)
timeout "$DEMO_S" python3 -m medanon --device cuda -q demo --out /tmp/medanon-demo --no-inception > "$OUT/demo.log" 2>&1
echo "{\"check\": \"demo-full\", \"rc\": $?, \"seconds\": $(( $(date +%s) - start )), \"limit_s\": $DEMO_S}" \
  | tee -a "$OUT/gpu_check.jsonl"
cp /tmp/medanon-demo/metrics.jsonl "$OUT/demo_metrics.jsonl" 2>/dev/null || true
for args in "--precision fp32" "" "--amp bf16" "--amp bf16 --clusters 32 --batch 128"; do
  # shellcheck disable=SC2086
  timeout 120 python3 benchmarks/device.py --device cuda --size 256 --only ksalsa,inversion --ksalsa-steps 20 $args
done >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
timeout 120 python3 benchmarks/device.py --device cuda --size 256 --only gan_train --gan-steps 5 \
  >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
timeout 120 python3 benchmarks/clustering.py --device cuda --check 3000 --n 35126,377110 --progress \
  >> "$OUT/clustering.jsonl" 2>> "$OUT/bench.err"
