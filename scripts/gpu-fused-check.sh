#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90, CUDA 13): build and run what checks the fused neighbours
# of issue 29 item 2 (residual_layernorm_forward, matmul_gelu_forward's bias + GELU pass, the
# vectorized bias add, gelu_backward_bias, cross_entropy_forward_backward), in one call of under
# 10 minutes on the H200 machine:
#   tests      strata_test_cuda's cases of the fused and touched kernels: each fused kernel bitwise
#              against the unfused CUDA kernels and within FP32 tolerance of the CPU, add_bias
#              bitwise the CPU's, layernorm, gelu, cross-entropy, the cuBLAS GEMMs; with their speed
#              lines (fused vs apart, GB/s)
#   sanitize   compute-sanitizer memcheck on those cases (the correctness ones, not the speed ones)
#   model      strata_test_model's CUDA cases (every activation policy bitwise alike, the trajectory
#              against the CPU, resume bitwise) and strata_test_layers' GPT-2 block on CUDA
#   bench      strata_bench_gpt_step --model 124M --batch 8 --seq 1024, activations kept and
#              recomputed, this tree against BASE (default 6b06cf9, the commit this branch started
#              from; set BASE to the merged tree without this branch), built from `git archive BASE`
#              beside it, alternated twice: step.txt has the JSON lines and ms per step side by side,
#              step_ops_*.txt the per-op tables (layernorm/residual/gelu/matmul rows before and after)
#              Without git (or BASE=none) only this tree's step runs.
# Everything goes to $OUT (default ./gpu-out): build logs, test and sanitizer logs, step.txt,
# summary.txt. Builds live in temporary directories (removed at the end unless KEEP_BUILD=1).
# Usage: bash scripts/gpu-fused-check.sh [tests] [sanitize] [model] [bench]   (default: all four)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=$(mktemp -d /tmp/strata-fused-XXXXXX)
BASE_SRC=$(mktemp -d /tmp/strata-fused-base-src-XXXXXX)
BASE_BUILD=$(mktemp -d /tmp/strata-fused-base-XXXXXX)
[[ -n ${KEEP_BUILD:-} ]] || trap 'rm -rf "$BUILD" "$BASE_SRC" "$BASE_BUILD"' EXIT
BASE=${BASE:-6b06cf9}
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(tests sanitize model bench)
has() { local s; for s in "${stages[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
log() { echo "=== $* ($(date +%T), ${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
status=0
# The cases of strata_test_cuda this change touches (doctest filters, comma = or).
cases='*residual_layernorm*,*add_bias*,*bias_gelu*,*layernorm*,*gelu*,*matmul*,*GEMMs*,*cross_entropy*'
correctness_cases='*residual_layernorm_forward: the bits*,*add_bias and bias_gelu_forward*,*gelu_backward_bias: the bits*'
correctness_cases+=',*cross_entropy_forward_backward: the bits*'

log "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"

base_ok=0
if has bench && [[ $BASE != none ]]; then
  if git rev-parse --verify -q "$BASE^{commit}" > /dev/null 2>&1 && git archive "$BASE" | tar -x -C "$BASE_SRC"; then
    base_ok=1
    log "configure and build BASE $BASE's strata_bench_gpt_step in the background"
    ( cmake -S "$BASE_SRC" --preset cuda-release -B "$BASE_BUILD" -DSTRATA_BUILD_EXAMPLES=OFF -DSTRATA_BUILD_BENCH=ON \
        -DSTRATA_USE_LIBURING=OFF > "$OUT/base_configure.log" 2>&1 &&
      cmake --build "$BASE_BUILD" -j"$(( $(nproc) / 2 ))" --target strata_bench_gpt_step > "$OUT/base_build.log" 2>&1
    ) &
    base_pid=$!
  else
    echo "BASE $BASE: no git or no such commit here; the step runs for this tree only" | tee -a "$OUT/summary.txt"
  fi
fi

log "configure (cuda-release, examples off) in $BUILD"
cmake --preset cuda-release -B "$BUILD" -DSTRATA_BUILD_EXAMPLES=OFF -DSTRATA_BUILD_BENCH=ON -DSTRATA_USE_LIBURING=OFF \
  > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
targets=(strata_test_cuda)
has model && targets+=(strata_test_model strata_test_layers)
has bench && targets+=(strata_bench_gpt_step)
log "build ${targets[*]}"
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}" > "$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"; exit 1; }
log "built"
test_bin="$BUILD/tests/strata_test_cuda"

if has tests; then
  log "tests: strata_test_cuda -tc='$cases'"
  "$test_bin" -tc="$cases" > "$OUT/test_cuda.log" 2>&1 || status=1
  grep -E "ERROR|FAILED|test cases:|assertions:" "$OUT/test_cuda.log" | sort | uniq -c | head -20 | tee -a "$OUT/summary.txt"
  grep -E "fused|apart|GB/s" "$OUT/test_cuda.log" | grep -v "^TEST CASE" | tee -a "$OUT/summary.txt"
fi
if has sanitize; then
  log "compute-sanitizer --tool memcheck on: $correctness_cases"
  timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool memcheck --error-exitcode 3 "$test_bin" \
    -tc="$correctness_cases" > "$OUT/sanitizer_memcheck.log" 2>&1
  rc=$?
  echo "exit $rc" | tee -a "$OUT/summary.txt"
  [[ $rc -eq 0 ]] || status=1
  tail -4 "$OUT/sanitizer_memcheck.log" | tee -a "$OUT/summary.txt"
fi
if has model; then
  log "model tests on CUDA: strata_test_model, strata_test_layers (GPT-2 block)"
  "$BUILD/tests/strata_test_model" -tc='*CUDA*,*cuda*,*every activation policy*,*resuming from a checkpoint*' \
    > "$OUT/test_model.log" 2>&1 || status=1
  "$BUILD/tests/strata_test_layers" -tc='*GPT-2 block*' > "$OUT/test_layers.log" 2>&1 || status=1
  for f in test_model test_layers; do
    echo "$f: $(grep -E "test cases:|assertions:" "$OUT/$f.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
    grep -E "ERROR|FAILED" "$OUT/$f.log" | head -10 | tee -a "$OUT/summary.txt"
  done
fi
if has bench; then
  builds=(this)
  if [[ $base_ok -eq 1 ]]; then
    log "waiting for BASE's build"
    if wait "$base_pid"; then
      builds=(base this)
    else
      echo "BASE build failed (base_build.log); this tree only" | tee -a "$OUT/summary.txt"
      tail -5 "$OUT/base_build.log" >> "$OUT/summary.txt"
    fi
  fi
  log "whole step: 124M B=8 T=1024, ${builds[*]}, alternated"
  : > "$OUT/step.txt"
  for activations in keep recompute; do
    for round in 1 2; do  # alternated, twice: drift of the GPU's clocks shows as a difference between rounds
      for which in "${builds[@]}"; do
        bin="$BUILD/bench/strata_bench_gpt_step"
        [[ $which == base ]] && bin="$BASE_BUILD/bench/strata_bench_gpt_step"
        name="${activations}_${which}_${round}"
        line=$("$bin" --model 124M --batch 8 --seq 1024 --steps 10 --activations "$activations" \
                 2> "$OUT/step_$name.err" | tee "$OUT/step_ops_$name.txt" | grep '^{' | head -1)
        [[ -n $line ]] || { status=1; tail -3 "$OUT/step_$name.err" | tee -a "$OUT/summary.txt"; }
        echo "$which $line" >> "$OUT/step.txt"
        ms=$(echo "$line" | grep -oE '"ms_per_step":[0-9.]+' | cut -d: -f2)
        loss=$(echo "$line" | grep -oE '"loss":[0-9.e+-]+' | cut -d: -f2)
        echo "  activations $activations, round $round, $which: ${ms:-?} ms/step, loss ${loss:-?}" |
          tee -a "$OUT/summary.txt"
      done
    done
  done
  for which in "${builds[@]}"; do
    echo "--- ops of $which (activations keep, round 1): layernorm, residual, gelu, matmul" >> "$OUT/summary.txt"
    grep -hE "layernorm|residual|gelu|matmul|bias|cross_entropy|zero" "$OUT/step_ops_keep_${which}_1.txt" | grep -v "^{" \
      >> "$OUT/summary.txt"
  done
fi
log "done, status $status"
exit $status
