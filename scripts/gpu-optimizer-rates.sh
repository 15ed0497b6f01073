#!/usr/bin/env bash
# On the GPU machine (sm_90, CUDA 13): measure every optimizer's host rate (every core) and device
# rate with strata's calibration (plan/calibrate.hpp), for machines/h200.json's
# "host_optimizer_Gparams_per_s" and "device_optimizer_Gparams_per_s", and print the 16.6 B GPT's
# Adafactor and AdamW plans and predictions with those rates:
#   build     strata-gpt (cuda-release, no tests or benchmarks) and strata_test_optim
#   rates     strata-gpt train --plan --recalibrate with XDG_CACHE_HOME=$OUT/cache: the calibration
#             (links, disk, GEMMs at the 16.6 B shapes, the optimizers) lands in
#             $OUT/cache/strata/calibration-*.json; optimizer-rates.txt has its optimizer rates
#   plans     the 16.6 B GPT (52 x 5120, B4 T1024, 100G host) planned with this machine's rates,
#             Adafactor and AdamW (plan-adafactor.txt, plan-adamw.txt: the plan and its prediction;
#             measured on 2026-12-03: Adafactor resident 14.2 s/step, predicted 11.5 s without its
#             device rate). The byte tokenizer (vocab 256) unless TOKENIZER=gpt2:DIR is given (the
#             measured run had GPT-2's 50257: 0.26 B parameters more in the embeddings)
#   optim     strata_test_optim's Adafactor and thread pool cases on this machine's cores (the
#             multi-threaded host update bitwise its one-thread update)
# Everything goes to $OUT (default ./gpu-out). Usage: bash scripts/gpu-optimizer-rates.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD_DIR:-$(mktemp -d /tmp/strata-rates-XXXXXX)}
mkdir -p "$BUILD"
log() { echo "=== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }
status=0

log "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
log "configure (cuda-release, benchmarks off) in $BUILD"
cmake --preset cuda-release -B "$BUILD" -DSTRATA_BUILD_BENCH=OFF > "$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
log "build strata-gpt strata_test_optim"
start=$SECONDS
cmake --build "$BUILD" -j"$(nproc)" --target strata-gpt strata_test_optim > "$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"; exit 1; }
echo "built in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
gpt=$(find "$BUILD" -name strata-gpt -type f -perm -u+x | head -1)

work=$(mktemp -d /tmp/strata-rates-work-XXXXXX)
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog number $i."; done > "$work/data.txt"
shape=(--data "$work/data.txt" --device cuda --seq-len 1024 --batch 4 --n-layer 52 --n-embd 5120 --n-head 40
       --host-budget 100G --steps 3)
[[ -n ${TOKENIZER:-} ]] && shape+=(--tokenizer "$TOKENIZER")
for optimizer in adafactor adamw; do
  log "plan: 16.6 B GPT, $optimizer, this machine calibrated"
  recalibrate=(); [[ $optimizer == adafactor ]] && recalibrate=(--recalibrate)
  XDG_CACHE_HOME="$OUT/cache" "$gpt" train "${shape[@]}" --optimizer "$optimizer" --out "$work/$optimizer" --plan \
    "${recalibrate[@]}" > "$OUT/plan-$optimizer.txt" 2>&1 || status=1
  grep -E "^machine:|predicted|placement|bound" "$OUT/plan-$optimizer.txt" | head -12 | tee -a "$OUT/summary.txt"
done
log "optimizer rates (G params/s) from the calibration cache"
python3 - "$OUT/cache/strata" > "$OUT/optimizer-rates.txt" <<'EOF' || status=1
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("calibration-*.json")):
    m = json.loads(f.read_text())["machine"]
    print(f.name)
    for key in ("host_optimizer_Gparams_per_s", "device_optimizer_Gparams_per_s", "device_memory_GBps"):
        print(f"  {key}: {json.dumps(m.get(key))}")
EOF
tee -a "$OUT/summary.txt" < "$OUT/optimizer-rates.txt"

log "strata_test_optim: Adafactor and the thread pool on $(nproc) cores"
"$BUILD/tests/strata_test_optim" -tc='*adafactor*,*thread*,*threads*' > "$OUT/test_optim.log" 2>&1 || status=1
grep -E "ERROR|FAILED|test cases:|assertions:" "$OUT/test_optim.log" | head -20 | tee -a "$OUT/summary.txt"
rm -rf "$work"
[[ -z ${BUILD_DIR:-} ]] && rm -rf "$BUILD"
log "done, status $status"
exit $status
