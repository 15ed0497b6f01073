#!/usr/bin/env bash
# The main job: on a fresh Debian machine, install what is missing, build strata-gpt (Release),
# train a small GPT on a corpus every Debian system has (the licence texts in
# /usr/share/common-licenses), show the loss falling, and sample from the result.
#
#   bash scripts/train-demo.sh [strata-gpt train flags, e.g. --steps 600]
#
# Flags given here override the demo's defaults below (the rest of the defaults stay). The run
# directory is runs/demo. A new demo trains in runs/demo.next and replaces the previous one only
# once it has finished: a failed or stopped new demo leaves the previous one whole. With --resume
# (e.g. --resume runs/demo --steps 600 --allow-option-changes continues the last run to 600 steps,
# on a schedule stretched to 600) the run continues in runs/demo itself.
#
# Where a GPU and nvcc are found (nvidia-smi lists a GPU), the CUDA backend is built and a bigger
# model trains longer; elsewhere the CPU backend trains a small one (README: what to expect).
#
# For tests: STRATA_DEMO_GPT=PATH uses that strata-gpt (no install, no build), STRATA_DEMO_OUT=DIR
# another run directory than runs/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${STRATA_DEMO_OUT:-runs/demo}

have_gpu() {
  command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU' &&
    { command -v nvcc > /dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; }
}
if have_gpu; then
  preset=cuda-release
  # 10.8M parameters, 8192 tokens a step: about 70 passes over the corpus
  defaults=(--device cuda --n-layer 6 --n-head 6 --n-embd 384 --seq-len 256 --batch 32 --steps 2000
            --lr 1e-3 --warmup 100 --eval-every 200)
else
  preset=cpu-release
  # 0.84M parameters, 1024 tokens a step
  defaults=(--device cpu --steps 300 --eval-every 50)
fi
if [[ -n "${STRATA_DEMO_GPT:-}" ]]; then
  gpt=$STRATA_DEMO_GPT
else
  bash scripts/install-deps.sh
  echo "building strata-gpt ($preset, $(nproc) jobs)"
  cuda_arch=()  # the GPU that is here (the preset's sm_90 would not run on another)
  [[ $preset == cuda-release ]] && cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES=native)
  # a tree configured before the presets used Ninja cannot change generator: configure it afresh
  fresh=()
  cache=build/$preset/CMakeCache.txt
  [[ -f $cache ]] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache" && fresh=(--fresh)
  cmake "${fresh[@]}" --preset "$preset" -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF "${cuda_arch[@]}" > /dev/null
  cmake --build "build/$preset" --target strata-gpt -j "$(nproc)"
  gpt="./build/$preset/examples/strata-gpt"
fi

# The defaults, less every flag the command line gives (a flag and its value, if it has one).
given() {
  local arg
  for arg in "${user_flags[@]}"; do [[ "$arg" == "$1" || "$arg" == "$1="* ]] && return 0; done
  return 1
}
user_flags=("$@")
args=()
set -- "${defaults[@]}"
while (($#)); do
  flag=$1
  shift
  value=()
  if (($#)) && [[ $1 != --* ]]; then value=("$1"); shift; fi
  given "$flag" || args+=("$flag" "${value[@]}")
done
# A new demo trains in $out.next (the demo's own scratch directory: what an earlier, stopped demo
# left there is replaced) and takes the place of the previous demo only once it has finished.
run=$out
if ! given --resume; then
  run=$out.next
  args+=(--overwrite)
fi

mkdir -p "$out" "$run"
corpus=$out/corpus.txt
# Every regular file (not the symlinks), in a fixed order, so the corpus is the same everywhere.
find /usr/share/common-licenses -maxdepth 1 -type f | LC_ALL=C sort | xargs cat > "$corpus.tmp"
mv "$corpus.tmp" "$corpus"
echo "corpus: $corpus ($(wc -c < "$corpus") bytes from /usr/share/common-licenses)"

"$gpt" train --data "$corpus" --out "$run" --metrics "$run/metrics.jsonl" "${args[@]}" "${user_flags[@]}"

# The new demo has finished: the previous one's checkpoints and run files go (what strata-gpt and
# this script wrote there, nothing else), and the new one's move in, latest last.
if [[ $run != "$out" ]]; then
  rm -f "$out/latest"
  for old in "$out"/step-[0-9]*; do
    if [[ -f $old/trainer_state.json ]]; then rm -rf "$old"; fi
  done
  rm -f "$out/loss.svg" "$out/metrics.jsonl"
  for new in "$run"/step-[0-9]* "$run/loss.svg" "$run/metrics.jsonl"; do
    if [[ -e $new ]]; then mv "$new" "$out/"; fi
  done
  mv "$run/latest" "$out/latest"
  rm -rf "$run"
fi

# OUT/latest names the latest complete checkpoint (written after it)
latest="$out/$(cat "$out/latest")"
echo
echo "sample from $latest:"
"$gpt" sample --checkpoint "$latest" --prompt "This License" --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 7

# strata-gpt is not installed on PATH: say where it is, and what to try next
gpt_path=$(realpath "$gpt")
echo
echo "strata-gpt is $gpt_path (built here, not on PATH). Next:"
echo "  $gpt_path sample --checkpoint $out --prompt \"This License\" --max-new-tokens 300 --temperature 0.8"
echo "  bash scripts/train-demo.sh --resume $out --steps 600 --allow-option-changes   # train further"
echo "  $gpt_path train --help                                     # every flag; README.md, \"strata-gpt\""
