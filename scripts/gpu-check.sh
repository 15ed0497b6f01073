#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90): build strata with the CUDA backend and run, by stage,
#   tests      every doctest suite that has CUDA instantiations, the CUDA kernel suite, and the
#              examples' suites (Llama block and model, LoRA) with theirs
#   sanitize   compute-sanitizer memcheck and racecheck on the CUDA kernel suite
#   bench      strata_bench_gpt_step (resident / streamed) next to bench/torch_gpt2_step.py
#   newuser    a GPT-2 directory made by transformers: strata-gpt train --init-from it on the GPU,
#              sample, and load strata's checkpoint back in transformers
# Logs go to $OUT (default ./gpu-out). Usage: bash scripts/gpu-check.sh tests sanitize bench newuser
# STRATA_GPU_BIN=DIR uses binaries built elsewhere (tests/, bench/, examples/ below DIR) when
# they run here, and builds only otherwise.
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
[[ -n ${STRATA_GPU_BIN:-} ]] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DSTRATA_BUILD_BENCH=ON > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
targets=(strata_test_cuda strata_test_model strata_test_stream strata_test_hf strata_test_tier strata_test_layers
         strata_test_llama strata_test_lora)
(has bench || has newuser) && targets+=(strata_bench_gpt_step strata-gpt)
if [[ -n ${STRATA_GPU_BIN:-} ]] && "$STRATA_GPU_BIN/tests/strata_test_cuda" -ltc > /dev/null 2>&1; then
  log "using the binaries of $STRATA_GPU_BIN"
  BUILD=$STRATA_GPU_BIN
else
  cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}" > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
fi

status=0
if has tests; then
  for t in cuda model stream hf tier layers examples/llama examples/lora; do
    bin="$BUILD/tests/strata_test_$t"
    [[ $t == examples/* ]] && bin=$(find "$BUILD/examples" -type f -name "strata_test_${t#examples/}" | head -1)
    [[ -x $bin ]] || { echo "missing $bin"; status=1; continue; }
    log "$(basename "$bin")"
    "$bin" > "$OUT/test_${t#examples/}.log" 2>&1 || status=1
    grep -E "SKIPPED|ERROR|FAILED|test cases:|assertions:" "$OUT/test_${t#examples/}.log" | grep -v "^$" | sort | uniq -c | head -20
  done
  grep -h "MESSAGE\|CUDA vs CPU\|TFLOP\|ms" "$OUT"/test_cuda.log "$OUT"/test_model.log | head -30
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool"
    # the speed cases repeat the same kernels on 124M-element buffers: minutes under the tools
    # STRATA_TEST_QUICK: the GEMM cases keep only small shapes (cuBLAS under racecheck is slow)
    exclude='*speed*'
    STRATA_TEST_QUICK=1 timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 "$BUILD/tests/strata_test_cuda" \
      --test-case-exclude="$exclude" > "$OUT/sanitizer_$tool.log" 2>&1
    echo "exit $?"; tail -4 "$OUT/sanitizer_$tool.log"
  done
fi
if has bench && [[ -z ${SKIP_TORCH:-} ]]; then
  log "bench: PyTorch eager, GPT-2 124M, B=8, T=1024, strict FP32"
  python3 bench/torch_gpt2_step.py --model 124M --batch 8 --seq 1024 --steps 10 2>&1 | tail -2 | tee -a "$OUT/bench.jsonl"
  python3 bench/torch_gpt2_step.py --model 124M --batch 8 --seq 1024 --steps 10 --sdpa 2>&1 | tail -2 | tee -a "$OUT/bench.jsonl"
fi
if has bench; then
  for placement in resident streamed; do
    log "bench: strata $placement, GPT-2 124M, B=8, T=1024"
    "$BUILD/bench/strata_bench_gpt_step" --model 124M --batch 8 --seq 1024 --steps 10 --placement $placement \
      --trace "$OUT/trace-124M-$placement.json" 2>&1 | tee -a "$OUT/bench.txt"
  done
fi
if has newuser; then
  log "new user: a transformers GPT-2 directory, trained and sampled with strata-gpt on the GPU"
  rm -rf /tmp/hf-gpt2 /tmp/newuser
  python3 - <<'PY' 2>&1 | tail -3
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
tok = GPT2TokenizerFast.from_pretrained("tests/fixtures/gpt2")
model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_head=4, n_embd=256, n_positions=256))
model.save_pretrained("/tmp/hf-gpt2"); tok.save_pretrained("/tmp/hf-gpt2")
print("saved /tmp/hf-gpt2:", sum(p.numel() for p in model.parameters()), "parameters")
PY
  for f in vocab.json merges.txt; do [[ -f /tmp/hf-gpt2/$f ]] || cp tests/fixtures/gpt2/$f /tmp/hf-gpt2/; done
  cat README.md docs/*.md > /tmp/newuser-text.txt
  "$BUILD/examples/strata-gpt" train --init-from /tmp/hf-gpt2 --data /tmp/newuser-text.txt --seq-len 128 --batch 16 \
    --steps 150 --lr 1e-3 --eval-every 50 --device cuda --out /tmp/newuser --overwrite --metrics "$OUT/newuser-metrics.jsonl" \
    --trace "$OUT/trace-cli-resident.json" 2>&1 | tr '\r' '\n' | grep -v "^step.*|" | tail -12 | tee "$OUT/newuser.log"
  "$BUILD/examples/strata-gpt" sample --checkpoint /tmp/newuser/step-000150 --prompt "The storage tier" \
    --max-new-tokens 60 --seed 1 2>&1 | tee -a "$OUT/newuser.log"
  python3 - <<'PY' 2>&1 | tail -4 | tee -a "$OUT/newuser.log"
import torch
from transformers import GPT2LMHeadModel, GPT2TokenizerFast
m = GPT2LMHeadModel.from_pretrained("/tmp/newuser/step-000150").eval()
tok = GPT2TokenizerFast.from_pretrained("/tmp/newuser/step-000150")
ids = tok("The storage tier", return_tensors="pt").input_ids
out = m.generate(ids, max_new_tokens=30, do_sample=False, pad_token_id=tok.eos_token_id)
print("transformers loads strata's checkpoint; greedy:", repr(tok.decode(out[0])))
PY
fi
if has bench; then
  for placement in resident streamed; do
    log "bench: strata $placement, GPT-2 1.5B (XL shape), B=8, T=1024"
    "$BUILD/bench/strata_bench_gpt_step" --model 1.5B --batch 8 --seq 1024 --steps 2 --placement $placement \
      --trace "$OUT/trace-1.5B-$placement.json" 2>&1 | tee -a "$OUT/bench.txt"
  done
fi
exit $status
