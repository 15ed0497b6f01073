#!/usr/bin/env bash
# Peers at scale (issue 27): PyTorch FSDP2 with CPUOffloadPolicy next to strata on one GPU, in one
# call of at most ~9 minutes: both at a ~5B shape both can run (ms/step, tokens/s, strict FP32,
# B = 4, T = 1024), the largest GPT FSDP2 trains on this box (bisection of the depth at a fixed
# width, each try a subprocess with a time limit), and the plan strata makes for the first depth
# FSDP2 cannot train. Prints every try and one Markdown table (also OUT/capacity_peers.md).
# bench/capacity.sh is strata's own capacity (10.2B, 16.6B).
#
#   STRATA_GPU_BIN=build/cuda-release DATA=shared-copy bash bench/capacity_peers.sh
#
# Environment: OUT (default ./capacity-peers-out); STRATA_GPU_BIN: a build directory with
# examples/strata-gpt; DATA: a folder with corpus/nlp-corpus.txt and gpt2/; WIDTH and HEADS
# (default 4608 and 36); SPEED_DEPTH (default 20: 5.3B parameters); HOST_BUDGET (strata's, default
# 100G); DEADLINE (seconds for everything, default 530). Needs python3 with torch and transformers.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/capacity-peers-out}
BIN=${STRATA_GPU_BIN:-build/cuda-release}/examples/strata-gpt
DATA=${DATA:-shared-copy}
[[ -x "$BIN" ]] || { echo "no strata-gpt at $BIN (set STRATA_GPU_BIN to a CUDA build directory)" >&2; exit 1; }
python3 -c "import torch, transformers" || { echo "python3 needs torch and transformers" >&2; exit 1; }
exec python3 bench/capacity_peers.py --strata "$BIN" --data "$DATA" --out "$OUT" --width "${WIDTH:-4608}" \
  --heads "${HEADS:-36}" --speed-depth "${SPEED_DEPTH:-20}" --host-budget "${HOST_BUDGET:-100G}" \
  --deadline "${DEADLINE:-530}"
