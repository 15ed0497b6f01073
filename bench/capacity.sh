#!/usr/bin/env bash
# Capacity on one GPU (issue 13): the 10.2B GPT (40 x 4608) trained with its state spread over the
# device and pinned host memory by the planner's per-group homes, against the 1.5B GPT-2 XL shape
# trained resident, both through strata-gpt train in the same call, strict FP32, B = 4, T = 1024.
# Prints each run's plan and steps, and one Markdown table: ms/step (median of the steps after the
# first), model TFLOP/s (6 x parameters x tokens / step time) and the ratio to the 1.5B run.
#
#   STRATA_GPU_BIN=build/cuda-release DATA=shared-copy bash bench/capacity.sh
#
# Environment: OUT (default ./capacity-out): logs, metrics and capacity.md; STRATA_GPU_BIN: a build
# directory with examples/strata-gpt; DATA: a folder with corpus/nlp-corpus.txt and gpt2/ (vocab.json,
# merges.txt); HOST_BUDGET (default 100G: the pinned tier, leaving RAM for the process itself);
# STEPS_XL, STEPS_10B (default 6 and 4); ONLY: a bash regular expression of run names (xl, 10b, 16b).
# The 16b run (52 x 5120, 16.6B parameters: device + host + storage, --save none; STEPS_16B, default
# 4; LIMIT_16B seconds, default 560; LR_16B, default "--lr 3e-8 --min-lr 0 --schedule constant --warmup 0": at
# this width and depth Adam's first, sign-like step of 2e-6 already doubles the loss, see
# docs/benchmarks.md) runs only when ONLY names it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/capacity-out}
BIN=${STRATA_GPU_BIN:-build/cuda-release}/examples/strata-gpt
DATA=${DATA:-shared-copy}
HOST_BUDGET=${HOST_BUDGET:-100G}
ONLY=${ONLY:-xl|10b}
mkdir -p "$OUT"
common=(--device cuda --data "$DATA/corpus/nlp-corpus.txt" --tokenizer "gpt2:$DATA/gpt2" --seq-len 1024 --batch 4
        --eval-every 0 --save none --host-budget "$HOST_BUDGET")
run() {  # name, timeout, options...
  local name=$1 limit=$2; shift 2
  [[ $name =~ ^($ONLY)$ ]] || return 0
  echo "=== $name: strata-gpt train $* ($(date +%T))"
  rm -rf "$OUT/run-$name"
  timeout "$limit" "$BIN" train "${common[@]}" --out "$OUT/run-$name" --metrics "$OUT/$name.jsonl" "$@" \
    > "$OUT/$name.log" 2>&1
  echo "rc $?"
  cat "$OUT/$name.log"
}
run xl 150 --n-layer 48 --n-embd 1600 --n-head 25 --steps "${STEPS_XL:-6}"
run 10b 330 --n-layer 40 --n-embd 4608 --n-head 36 --steps "${STEPS_10B:-4}"
run 16b "${LIMIT_16B:-560}" --n-layer 52 --n-embd 5120 --n-head 40 --steps "${STEPS_16B:-4}" ${LR_16B:---lr 3e-8 --min-lr 0 --schedule constant --warmup 0} --storage-budget "${STORAGE_BUDGET:-52G}"
python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
params = {"xl": None, "10b": None, "16b": None}
rows, base = [], None
for name in ["xl", "10b", "16b"]:
    path = os.path.join(out, name + ".jsonl")
    log = os.path.join(out, name + ".log")
    if not os.path.exists(path):
        continue
    n = None
    for line in open(log, errors="replace"):
        if " parameters;" in line and "model:" in line:
            n = int(line.split(" parameters;")[0].split(": ")[-1])
    steps = [json.loads(l) for l in open(path) if l.strip().startswith("{") and '"step"' in l]
    if not steps or n is None:
        continue
    later = steps[1:] or steps
    ms = statistics.median(1000.0 * s["tokens"] / s["tokens_per_s"] for s in later)
    tflops = 6.0 * n * steps[0]["tokens"] / (ms / 1000.0) / 1e12
    if name == "xl":
        base = tflops
    rows.append((name, n, len(steps), ms, tflops, [round(s["loss"], 4) for s in steps]))
lines = ["| run | parameters | steps | ms/step | model TFLOP/s | vs 1.5B resident | losses |", "|---|---|---|---|---|---|---|"]
for name, n, k, ms, tf, losses in rows:
    ratio = f"{tf / base:.3f}" if base else "-"
    lines.append(f"| {name} | {n / 1e9:.2f} B | {k} | {ms:.1f} | {tf:.1f} | {ratio} | {losses} |")
table = "\n".join(lines)
print(table)
open(os.path.join(out, "capacity.md"), "w").write(table + "\n")
PY
