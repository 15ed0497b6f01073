#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90, CUDA 13): build ONLY the attention kernels' test suite,
# their benchmark and what the whole-model checks need, and run them:
#   tests      strata_test_cuda_attention: tests/cuda/attention_test.cu (forward, two-kernel backward),
#              tests/cuda/attention_backward_test.cu (key-tile backward vs the CPU kernel and the
#              two-kernel backward, T = 1 .. 8192, GQA, bitwise repeatable) and
#              tests/cuda/attention_ops_test.cu (ops<cuda_backend>'s choice, attention_backward_pick:
#              partials in one band or in bands, ordered, the two kernels; the kernels' bits)
#   sanitize   compute-sanitizer memcheck and racecheck on the small case of
#              attention_backward_test.cu (it runs the forward, the two-kernel backward and both
#              key-tile backwards, partials also in bands)
#   bench      strata_bench_attention: two-kernel (recompute) vs key-tile backward (partials in
#              one band and in bands of <= 2 GiB, ordered) at B=8 T=1024 and B=1 T=32768 / 65536,
#              NH=12, HS=64; and a GQA shape
#   model      the whole model on the GPU with the backward ops<cuda_backend> picks:
#              strata_test_model's CUDA cases (the 10-step trajectory against the CPU backend,
#              every activation policy bitwise alike, resume bitwise), strata_test_layers' GPT-2
#              block on CUDA; then strata_bench_gpt_step --model 124M --batch 8 --seq 1024, with
#              activations kept and recomputed, each with the library's backward (key-tile partials
#              here) and with STRATA_BENCH_ATTENTION_BACKWARD=two-kernel (the old backward), in
#              alternation: model.txt has the four JSON lines and the ms per step side by side
# Everything goes to $OUT (default ./gpu-out): configure/build logs, test and sanitizer logs,
# bench.txt, model.txt, summary.txt. The build lives in a temporary directory (removed at the end
# unless KEEP_BUILD=1; BUILD_DIR=dir builds in dir and keeps it, so that a second call, e.g. for
# the stages left out of the first, rebuilds nothing). Usage:
#   bash scripts/gpu-attention-check.sh [tests] [sanitize] [bench] [model]   (default: all four)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if [[ -n ${BUILD_DIR:-} ]]; then  # kept, and reused by a later call (e.g. BUILD_DIR=build/gpu-attention)
  BUILD=$BUILD_DIR
  mkdir -p "$BUILD"
else
  BUILD=$(mktemp -d /tmp/strata-attention-XXXXXX)
  [[ -n ${KEEP_BUILD:-} ]] || trap 'rm -rf "$BUILD"' EXIT
fi
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(tests sanitize bench model)
has() { local s; for s in "${stages[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
log() { echo "=== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }
status=0

log "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
log "configure (cuda-release, examples off) in $BUILD"
cmake --preset cuda-release -B "$BUILD" -DSTRATA_BUILD_EXAMPLES=OFF -DSTRATA_BUILD_BENCH=ON > "$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
targets=(strata_test_cuda_attention strata_bench_attention)
has model && targets+=(strata_test_model strata_test_layers strata_bench_gpt_step)
log "build ${targets[*]}"
start=$SECONDS
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}" > "$OUT/build.log" 2>&1 ||
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
    timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 3 "$test_bin" \
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
if has model; then
  log "model tests on CUDA: strata_test_model, strata_test_layers (GPT-2 block)"
  "$BUILD/tests/strata_test_model" -tc='*CUDA*,*cuda*,*every activation policy*,*resuming from a checkpoint*' \
    > "$OUT/test_model.log" 2>&1 || status=1
  "$BUILD/tests/strata_test_layers" -tc='*GPT-2 block*CUDA*' > "$OUT/test_layers.log" 2>&1 || status=1
  for f in test_model test_layers; do
    echo "$f: $(grep -E "test cases:|assertions:" "$OUT/$f.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
    grep -E "ERROR|FAILED" "$OUT/$f.log" | head -10 | tee -a "$OUT/summary.txt"
  done
  log "whole step: 124M B=8 T=1024, key-tile partials (library) vs two-kernel (STRATA_BENCH_ATTENTION_BACKWARD)"
  step_bin="$BUILD/bench/strata_bench_gpt_step"
  : > "$OUT/model.txt"
  for activations in keep recompute; do
    for round in 1 2; do  # alternated, twice: drift of the GPU's clocks shows as a difference between rounds
      for backward in library two-kernel; do
        env_value=""; [[ $backward == two-kernel ]] && env_value=two-kernel
        line=$(STRATA_BENCH_ATTENTION_BACKWARD=$env_value "$step_bin" --model 124M --batch 8 --seq 1024 --steps 10 \
                 --activations "$activations" 2> "$OUT/step_${activations}_${backward}_${round}.err" |
               tee "$OUT/step_${activations}_${backward}_${round}.txt" | grep '^{' | head -1)
        [[ -n $line ]] || { status=1; tail -3 "$OUT/step_${activations}_${backward}_${round}.err" | tee -a "$OUT/summary.txt"; }
        echo "$line" >> "$OUT/model.txt"
        ms=$(echo "$line" | grep -oE '"ms_per_step":[0-9.]+' | cut -d: -f2)
        which=$(echo "$line" | grep -oE '"attention_backward":"[^"]*"' | cut -d: -f2)
        loss=$(echo "$line" | grep -oE '"loss":[0-9.e+-]+' | cut -d: -f2)
        echo "  activations $activations, round $round, $backward ($which): ${ms:-?} ms/step, loss ${loss:-?}" |
          tee -a "$OUT/summary.txt"
      done
    done
  done
  grep -hE "attention_(forward|backward)" "$OUT"/step_keep_*_1.txt | grep -v "^{" > "$OUT/step_attention_ops.txt"
fi
log "done, status $status"
exit $status
