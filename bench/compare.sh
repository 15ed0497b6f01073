#!/usr/bin/env bash
# strata against PyTorch on one GPU, in one call of at most 10 minutes (issue 12, item 4): builds
# strata_bench_gpt_step with the CUDA backend, runs every system on the same shapes and settings,
# and prints one Markdown table (bench/compare_table.py), also written to $OUT/compare.md.
#
#   bash bench/compare.sh                        # from the repository root or anywhere
#   STRATA_GPU_BIN=build/gpu bash bench/compare.sh   # use $STRATA_GPU_BIN/bench/strata_bench_gpt_step
#
# Shapes: GPT-2 124M at B=8 and the 1.5B GPT-2 XL shape at B=4, T=1024, random token ids, strict
# FP32 (124M also TF32); the same step everywhere: clip 1.0, AdamW lr 3e-4, betas (0.9, 0.95),
# wd 0.1 on 2-D weights. Runs, in this order (the last ones are the first to go if time runs out):
#   strata resident, activations recompute and keep    124M FP32, 124M TF32, then 1.5B FP32
#   strata streamed (weights, grads, m, v in pinned host RAM; placement forced), keep: 124M, 1.5B
#   PyTorch eager, HF GPT2LMHeadModel, SDPA, fused AdamW: 124M FP32, 124M TF32, 1.5B FP32
#   PyTorch FSDP2 + CPUOffloadPolicy, one rank:           1.5B FP32, then 124M FP32
# 124M runs: 3 warm-up + 10 timed steps; 1.5B runs: 2 + 5 (strata: one more, traced, untimed).
#
# Wall time on the H200, measured in a trial call (2026-12-01, fresh machine): 382 s in all.
#   configure + CUDA build of strata_bench_gpt_step (-j16)                   65 s
#   strata 124M: 4 resident runs 5-7 s each, streamed 7 s                   33 s
#   strata 1.5B: initialization 34-51 s per run (1.56e9 normal draws on one thread, pinning);
#                resident recompute 50 s, keep 42 s, streamed 63 s            155 s
#   PyTorch eager: 124M 20 s, TF32 15 s, 1.5B 24 s (imports ~8 s each)       60 s
#   FSDP2: 1.5B 49 s (2.4 s/step), 124M 19 s                                 68 s
# A build that takes 3 minutes (cold caches) still leaves ~2 minutes of margin.
# Every run has its own timeout, and the whole call a deadline ($COMPARE_BUDGET_S, default 540 s
# after the start): a run that would start too close to it is skipped, one that runs past it is
# ended, and the table still comes, with "failed", "timeout" or "skipped" in those rows.
#
# Environment: OUT (default ./compare-out): results.jsonl (one record per run), logs/, compare.md,
# traces; STRATA_GPU_BIN: a build directory that has bench/strata_bench_gpt_step (no build then);
# STRATA_COMMIT: the commit the table names (where the binaries were built elsewhere, or this copy's
# git history is not the tree's; default: this checkout's HEAD);
# COMPARE_BUDGET_S; COMPARE_ONLY: a bash regular expression, only runs whose name matches;
# COMPARE_DRY=1: the whole pipeline on the CPU with the tiny model and a CPU build (a test of this
# script: the PyTorch rows fail where torch is absent).
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in bench/
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/compare-out}
BUDGET_S=${COMPARE_BUDGET_S:-540}
start=$(date +%s)
deadline=$((start + BUDGET_S))
mkdir -p "$OUT/logs"
results=$OUT/results.jsonl
: > "$results"
log() { echo "=== $* ($(date +%T), $(($(date +%s) - start)) s)"; }

if [[ -n ${COMPARE_DRY:-} ]]; then
  small=tiny large=tiny small_batch=2 large_batch=2 seq=64 device=cpu build=build/bench-cpu cuda=OFF
else
  small=124M large=1.5B small_batch=8 large_batch=4 seq=1024 device=cuda build=build/bench-gpu cuda=ON
fi

log "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -2 || echo "no nvidia-smi here"
bin=${STRATA_GPU_BIN:+$STRATA_GPU_BIN/bench/strata_bench_gpt_step}
if [[ -n $bin && -x $bin ]]; then
  log "using $bin"
else
  [[ -n $bin ]] && echo "no executable $bin: building"
  bin=$build/bench/strata_bench_gpt_step
  log "configure + build strata_bench_gpt_step ($build, CUDA $cuda)"
  build_s=$((deadline - $(date +%s) - 120))  # leave at least two minutes for the runs
  ((build_s < 60)) && build_s=60
  if timeout "$build_s" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=$cuda \
       -DCMAKE_CUDA_ARCHITECTURES=90 -DSTRATA_BUILD_BENCH=ON -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_EXAMPLES=OFF \
       > "$OUT/logs/configure.log" 2>&1 &&
     timeout "$build_s" cmake --build "$build" -j"$(nproc)" --target strata_bench_gpt_step \
       > "$OUT/logs/build.log" 2>&1; then
    log "built"
  else
    echo "build failed or timed out (the strata rows will say failed):"
    grep -hE "error|Error" "$OUT/logs/configure.log" "$OUT/logs/build.log" 2>/dev/null | head -20
  fi
fi

# run NAME SYSTEM MODEL PRECISION TIMEOUT_S MIN_S COMMAND...
run() {
  local name=$1 system=$2 model=$3 precision=$4 timeout_s=$5 min_s=$6
  shift 6
  if [[ -n ${COMPARE_ONLY:-} && ! $name =~ $COMPARE_ONLY ]]; then return 0; fi
  python3 bench/compare_run.py --results "$results" --log "$OUT/logs/$name.log" --name "$name" --system "$system" \
    --model "$model" --precision "$precision" --timeout "$timeout_s" --min-s "$min_s" --deadline "$deadline" -- "$@"
}
strata_cmd() {  # strata_cmd MODEL BATCH WARMUP STEPS ARGS...: sets cmd
  local model=$1 batch=$2 warmup=$3 steps=$4
  shift 4
  cmd=("$bin" --model "$model" --batch "$batch" --seq "$seq" --warmup "$warmup" --steps "$steps" --device "$device" "$@")
}
s_small=("$small_batch" 3 10)  # batch, warm-up, timed steps
s_large=("$large_batch" 2 5)

log "strata, $small"
strata_cmd "$small" "${s_small[@]}" --activations recompute
run "$small-fp32-strata-resident-recompute" strata-resident-recompute "$small" fp32 90 15 "${cmd[@]}"
strata_cmd "$small" "${s_small[@]}" --activations keep --trace "$OUT/trace-$small-resident-keep.json"
run "$small-fp32-strata-resident-keep" strata-resident-keep "$small" fp32 90 15 "${cmd[@]}"
strata_cmd "$small" "${s_small[@]}" --activations recompute --tf32
run "$small-tf32-strata-resident-recompute" strata-resident-recompute "$small" tf32 90 15 "${cmd[@]}"
strata_cmd "$small" "${s_small[@]}" --activations keep --tf32
run "$small-tf32-strata-resident-keep" strata-resident-keep "$small" tf32 90 15 "${cmd[@]}"
strata_cmd "$small" "${s_small[@]}" --placement streamed --activations keep --trace "$OUT/trace-$small-streamed-keep.json"
run "$small-fp32-strata-streamed-keep" strata-streamed-keep "$small" fp32 90 20 "${cmd[@]}"
log "strata, $large"
strata_cmd "$large" "${s_large[@]}" --activations recompute
run "$large-fp32-strata-resident-recompute" strata-resident-recompute "$large" fp32 120 60 "${cmd[@]}"
strata_cmd "$large" "${s_large[@]}" --activations keep
run "$large-fp32-strata-resident-keep" strata-resident-keep "$large" fp32 120 55 "${cmd[@]}"
strata_cmd "$large" "${s_large[@]}" --placement streamed --activations keep --trace "$OUT/trace-$large-streamed-keep.json"
run "$large-fp32-strata-streamed-keep" strata-streamed-keep "$large" fp32 150 75 "${cmd[@]}"

torch_args_small=(--model "$small" --batch "${s_small[0]}" --seq "$seq" --warmup "${s_small[1]}" --steps "${s_small[2]}")
torch_args_large=(--model "$large" --batch "${s_large[0]}" --seq "$seq" --warmup "${s_large[1]}" --steps "${s_large[2]}")
log "PyTorch eager (SDPA)"
run "$small-fp32-pytorch-eager-sdpa" pytorch-eager-sdpa "$small" fp32 90 25 python3 bench/torch_gpt2_step.py "${torch_args_small[@]}" --sdpa
run "$small-tf32-pytorch-eager-sdpa" pytorch-eager-sdpa "$small" tf32 90 25 python3 bench/torch_gpt2_step.py "${torch_args_small[@]}" --sdpa --tf32
run "$large-fp32-pytorch-eager-sdpa" pytorch-eager-sdpa "$large" fp32 120 40 python3 bench/torch_gpt2_step.py "${torch_args_large[@]}" --sdpa
log "PyTorch FSDP2, CPUOffloadPolicy, one rank"
run "$large-fp32-pytorch-fsdp2-offload" pytorch-fsdp2-offload "$large" fp32 150 60 python3 bench/torch_fsdp2_offload_step.py "${torch_args_large[@]}"
run "$small-fp32-pytorch-fsdp2-offload" pytorch-fsdp2-offload "$small" fp32 90 25 python3 bench/torch_fsdp2_offload_step.py "${torch_args_small[@]}"

log "table"
if [[ -n ${STRATA_COMMIT:-} ]]; then
  commit=$STRATA_COMMIT
elif commit=$(git rev-parse --short HEAD 2>/dev/null); then
  git diff --quiet HEAD -- include src bench 2>/dev/null || commit+=" with uncommitted changes in include/ src/ bench/"
else
  commit="unknown (no git here: set STRATA_COMMIT)"
fi
gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
python3 bench/compare_table.py "$results" --out "$OUT/compare.md" \
  --meta "commit: $commit" \
  --meta "machine: ${gpu:-no GPU}, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo)" \
  --meta "command: bash bench/compare.sh (budget ${BUDGET_S} s; this call took $(($(date +%s) - start)) s)"
failed=$(grep -vc '"status": "ok"' "$results")
log "done: $failed of $(wc -l < "$results") runs not ok"
[[ $failed -eq 0 ]]
