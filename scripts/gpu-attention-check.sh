#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90, CUDA 13): build ONLY the attention kernels' test suite
# and benchmark, and run them:
#   tests      strata_test_cuda_attention: tests/cuda/attention_test.cu (forward, two-kernel backward)
#              and tests/cuda/attention_backward_test.cu (key-tile backward vs the CPU kernel and
#              the two-kernel backward, T = 1 .. 8192, GQA, bitwise repeatable)
#   sanitize   compute-sanitizer memcheck and racecheck on the small case of
#              attention_backward_test.cu (it runs the forward, the two-kernel backward and both
#              key-tile backwards)
#   bench      strata_bench_attention: two-kernel (recompute) vs key-tile backward (partials,
#              ordered) at B=8 T=1024 and B=1 T=32768 / 65536, NH=12, HS=64; and a GQA shape
# Everything goes to $OUT (default ./gpu-out): configure/build logs, test and sanitizer logs,
# bench.txt, summary.txt. The build lives in a temporary directory (removed at the end unless
# KEEP_BUILD=1). Usage: bash scripts/gpu-attention-check.sh [tests] [sanitize] [bench] (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=$(mktemp -d /tmp/strata-attention-XXXXXX)
[[ -n ${KEEP_BUILD:-} ]] || trap 'rm -rf "$BUILD"' EXIT
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(tests sanitize bench)
has() { local s; for s in "${stages[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
log() { echo "=== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }
status=0

log "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
log "configure (cuda-release, examples off) in $BUILD"
cmake --preset cuda-release -B "$BUILD" -DSTRATA_BUILD_EXAMPLES=OFF -DSTRATA_BUILD_BENCH=ON > "$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
log "build strata_test_cuda_attention strata_bench_attention"
start=$SECONDS
cmake --build "$BUILD" -j"$(nproc)" --target strata_test_cuda_attention strata_bench_attention > "$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"; exit 1; }
echo "built in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
test_bin="$BUILD/tests/strata_test_cuda_attention"
bench_bin="$BUILD/bench/strata_bench_attention"

if has tests; then
  log "tests: $(basename "$test_bin")"
  "$test_bin" > "$OUT/test_attention.log" 2>&1 || status=1
  grep -E "ERROR|FAILED|test cases:|assertions:" "$OUT/test_attention.log" | sort | uniq -c | head -20 | tee -a "$OUT/summary.txt"
  grep -E "MESSAGE|vs two-kernel|vs CPU|TFLOP" -A1 "$OUT/test_attention.log" | grep -vE "^--$|MESSAGE" | head -80 > "$OUT/test_attention_errors.txt"
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool"
    timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 3 "$test_bin" \
      --test-case='*sanitizer case*' \
      > "$OUT/sanitizer_$tool.log" 2>&1
    rc=$?
    echo "exit $rc" | tee -a "$OUT/summary.txt"
    [[ $rc -eq 0 ]] || status=1
    tail -4 "$OUT/sanitizer_$tool.log" | tee -a "$OUT/summary.txt"
  done
fi
if has bench; then
  log "bench: recompute vs key tiles"
  "$bench_bin" 2>&1 | tee "$OUT/bench.txt" | tee -a "$OUT/summary.txt" || status=1
  log "bench: GQA (Llama-3-8B heads: NH=32, NKV=8, HS=128) at T=8192, key tiles only"
  "$bench_bin" 1 8192 32 8 128 2>&1 | tee -a "$OUT/bench.txt" | tee -a "$OUT/summary.txt" || status=1
fi
log "done, status $status"
exit $status
