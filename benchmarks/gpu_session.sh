#!/usr/bin/env bash
# Everything a lent GPU machine should run, in one call that must end inside TOTAL_SECONDS (default 570; a device
# call may run 600 s). In order of importance: every command (gpu_check.py, at most CHECK_SECONDS: on an H100 its
# 26 commands take about 210 s); the first and second pass of the evaluation's utility probe; clustering at
# N = 35,126 without and with CUDA graphs, then 377,110 (at most 175 s); k-SALSA and the inversion at 256 px in
# bf16 with 64 clusters per batch (the best setting measured); GAN training at 256 px, batch 64, in float32 and in
# bf16; then
# the demo end to end with whatever time is left (no Inception weights are needed: FID/KID are left out with
# --no-inception; its metrics.jsonl gives each release's seconds). The GPU profiles measured are in
# docs/gpu.md and docs/experiments-gpu.md; `--profile N` of device.py and clustering.py and `--variant compile` of device.py repeat them.
# Results land in OUTDIR: at most 8 files of JSON lines and logs (what a device call brings back).
#   bash benchmarks/gpu_session.sh OUTDIR [TOTAL_SECONDS] [CHECK_SECONDS]
set -u
OUT=${1:?usage: gpu_session.sh OUTDIR [TOTAL_SECONDS] [CHECK_SECONDS]}
TOTAL_S=${2:-570}
CHECK_S=${3:-240}
# shellcheck source=benchmarks/gpu_budget.sh
source "$(dirname "$0")/gpu_budget.sh"
timeout "$CHECK_S" python3 benchmarks/gpu_check.py --work /tmp/medanon-gc --jsonl "$OUT/gpu_check.jsonl" \
  > "$OUT/gpu_check.out" 2>&1
tar czf "$OUT/gpu_check_logs.tgz" -C /tmp/medanon-gc logs
# the evaluation's first release took 19 s on an H100 against 4 s on 2 CPU cores: one-time costs? (first vs second pass)
timeout "$(within 60)" python3 benchmarks/device.py --device cuda --only first_use >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
# the greedy's picks as CUDA graphs (the default) against the same code without them, then the graphs at MIMIC's N
timeout "$(within 25)" env MEDANON_CUDA_GRAPHS=0 python3 benchmarks/clustering.py --device cuda --n 35126 \
  >> "$OUT/clustering.jsonl" 2>> "$OUT/bench.err"
timeout "$(within 150)" python3 benchmarks/clustering.py --device cuda --check 3000 --n 35126,377110 \
  >> "$OUT/clustering.jsonl" 2>> "$OUT/bench.err"
timeout "$(within 90)" python3 benchmarks/device.py --device cuda --size 256 --only ksalsa,inversion --ksalsa-steps 20 \
  --amp bf16 --clusters 64 --batch 512 >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
timeout "$(within 60)" python3 benchmarks/device.py --device cuda --size 256 --only gan_train --gan-steps 5 \
  --gan-batch 64 >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
# the same with the GAN's forward passes under bf16 autocast (precision: bf16; not measured on a GPU: docs/gpu.md)
timeout "$(within 60)" python3 benchmarks/device.py --device cuda --size 256 --only gan_train --gan-steps 5 \
  --gan-batch 64 --amp bf16 >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
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
