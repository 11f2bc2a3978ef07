#!/usr/bin/env bash
# Everything a lent GPU machine should run, in one call that must end inside TOTAL_SECONDS (default 570; a device
# call may run 600 s). In order of importance: every command (gpu_check.py, at most CHECK_SECONDS), the throughput
# benchmarks at 256 px (k-SALSA and inversion in bf16 with 32 clusters per batch, the best setting of docs/gpu.md,
# with the costliest operators profiled into bench.err, then 64 clusters and inversion batch 512; GAN training,
# profiled too), clustering up to N = 377,110 (at most 90 s), then the demo end to end with whatever time is left
# (no Inception weights are needed: FID/KID are left out with --no-inception). Results land in OUTDIR: 8 files of
# JSON lines and logs (a device call brings back at most 8).
#   bash benchmarks/gpu_session.sh OUTDIR [TOTAL_SECONDS] [CHECK_SECONDS]
set -u
OUT=${1:?usage: gpu_session.sh OUTDIR [TOTAL_SECONDS] [CHECK_SECONDS]}
TOTAL_S=${2:-570}
CHECK_S=${3:-200}
SECONDS=0
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
timeout "$CHECK_S" python3 benchmarks/gpu_check.py --work /tmp/medanon-gc --jsonl "$OUT/gpu_check.jsonl" \
  > "$OUT/gpu_check.out" 2>&1
tar czf "$OUT/gpu_check_logs.tgz" -C /tmp/medanon-gc logs
for args in "--amp bf16 --clusters 32 --batch 128 --profile 25" "--amp bf16 --clusters 64 --batch 512"; do
  # shellcheck disable=SC2086
  timeout 60 python3 benchmarks/device.py --device cuda --size 256 --only ksalsa,inversion --ksalsa-steps 20 $args
done >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
timeout 60 python3 benchmarks/device.py --device cuda --size 256 --only gan_train --gan-steps 5 --profile 20 \
  >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
timeout 90 python3 benchmarks/clustering.py --device cuda --check 3000 --n 35126,377110 --progress \
  >> "$OUT/clustering.jsonl" 2>> "$OUT/bench.err"
DEMO_S=$(( TOTAL_S - SECONDS - 5 ))
start=$SECONDS
if [ "$DEMO_S" -gt 10 ]; then
  timeout "$DEMO_S" python3 -m medanon --device cuda -q demo --out /tmp/medanon-demo --no-inception > "$OUT/demo.log" 2>&1
  rc=$?
else
  rc="\"not run\""
fi
echo "{\"check\": \"demo-full\", \"rc\": $rc, \"seconds\": $(( SECONDS - start )), \"limit_s\": $DEMO_S}" \
  | tee -a "$OUT/gpu_check.jsonl"
cp /tmp/medanon-demo/metrics.jsonl "$OUT/demo_metrics.jsonl" 2>/dev/null || true
