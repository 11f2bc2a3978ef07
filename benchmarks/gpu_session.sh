#!/usr/bin/env bash
# Everything a lent GPU machine should run, in one call that must end inside TOTAL_SECONDS (default 570; a device
# call may run 600 s). In order of importance: every command (gpu_check.py, at most CHECK_SECONDS); k-SALSA and the
# inversion at 256 px in bf16 with 64 clusters per batch, profiled (the costliest operators go to bench.err), then
# the same under torch.compile (benchmarks/device.py --variant compile); clustering up to N = 377,110, the first size
# profiled (at most 100 s); GAN training at 256 px, profiled; then the demo end to end with whatever time is left
# (no Inception weights are needed: FID/KID are left out with --no-inception). Results land in OUTDIR: 8 files of
# JSON lines and logs (a device call brings back at most 8).
#   bash benchmarks/gpu_session.sh OUTDIR [TOTAL_SECONDS] [CHECK_SECONDS]
set -u
OUT=${1:?usage: gpu_session.sh OUTDIR [TOTAL_SECONDS] [CHECK_SECONDS]}
TOTAL_S=${2:-570}
CHECK_S=${3:-200}
SECONDS=0
within() {  # seconds a step may take: at most $1, and never past TOTAL_S (at least 1)
  local left=$(( TOTAL_S - SECONDS - 5 ))
  [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
timeout "$CHECK_S" python3 benchmarks/gpu_check.py --work /tmp/medanon-gc --jsonl "$OUT/gpu_check.jsonl" \
  > "$OUT/gpu_check.out" 2>&1
tar czf "$OUT/gpu_check_logs.tgz" -C /tmp/medanon-gc logs
# k-SALSA and inversion: the best eager setting, profiled, then compiled (torch.compile: about 100 s to compile the
# inversion on an H200, more with k-SALSA's backward passes)
# (compiled: the inversion first, whose result is then in even if k-SALSA's compiling runs out of time)
for args in "--only ksalsa,inversion --clusters 64 --batch 512 --profile 25" \
            "--only inversion,ksalsa --clusters 64 --batch 128 --variant compile"; do
  # shellcheck disable=SC2086
  timeout "$(within 200)" python3 benchmarks/device.py --device cuda --size 256 --ksalsa-steps 20 --amp bf16 $args
done >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
timeout "$(within 100)" python3 benchmarks/clustering.py --device cuda --check 3000 --n 35126,377110 --progress --profile 30 \
  >> "$OUT/clustering.jsonl" 2>> "$OUT/bench.err"
timeout "$(within 60)" python3 benchmarks/device.py --device cuda --size 256 --only gan_train --gan-steps 5 --profile 20 \
  >> "$OUT/device256.jsonl" 2>> "$OUT/bench.err"
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
