#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90): build strata with the CUDA backend and run, by stage,
#   tests      every doctest suite that has CUDA instantiations, and the CUDA kernel suite
#   sanitize   compute-sanitizer memcheck and racecheck on the CUDA kernel suite
#   bench      strata_bench_gpt_step (resident / streamed) next to bench/torch_gpt2_step.py
# Logs go to $OUT (default ./gpu-out). Usage: bash scripts/gpu-check.sh tests sanitize bench
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=build/gpu
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(tests)
has() { local s; for s in "${stages[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
log() { echo "=== $* ($(date +%T))"; }

log "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
log "configure + build"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DSTRATA_BUILD_BENCH=ON > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
targets=(strata_test_cuda strata_test_model strata_test_stream strata_test_hf strata_test_tier)
has bench && targets+=(strata_bench_gpt_step strata-gpt)
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}" > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }

status=0
if has tests; then
  for t in cuda model stream hf tier; do
    log "strata_test_$t"
    "$BUILD/tests/strata_test_$t" > "$OUT/test_$t.log" 2>&1 || status=1
    grep -E "SKIPPED|ERROR|FAILED|test cases:|assertions:" "$OUT/test_$t.log" | grep -v "^$" | sort | uniq -c | head -20
  done
  grep -h "MESSAGE\|CUDA vs CPU\|TFLOP\|ms" "$OUT"/test_cuda.log "$OUT"/test_model.log | head -30
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$BUILD/tests/strata_test_cuda" ${SANITIZE_FILTER:-} \
      > "$OUT/sanitizer_$tool.log" 2>&1
    echo "exit $?"; tail -4 "$OUT/sanitizer_$tool.log"
  done
fi
if has bench; then
  log "bench: PyTorch eager, GPT-2 124M, B=8, T=1024, strict FP32"
  python3 bench/torch_gpt2_step.py --model 124M --batch 8 --seq 1024 --steps 10 2>&1 | tail -2 | tee -a "$OUT/bench.jsonl"
  python3 bench/torch_gpt2_step.py --model 124M --batch 8 --seq 1024 --steps 10 --sdpa 2>&1 | tail -2 | tee -a "$OUT/bench.jsonl"
  for placement in resident streamed; do
    log "bench: strata $placement, GPT-2 124M, B=8, T=1024"
    "$BUILD/bench/strata_bench_gpt_step" --model 124M --batch 8 --seq 1024 --steps 10 --placement $placement \
      --trace "$OUT/trace-124M-$placement.json" 2>&1 | tee -a "$OUT/bench.txt"
  done
fi
exit $status
