#!/usr/bin/env bash
# End-to-end: strata-gpt trains a tiny model on a shipped text, resumes, samples, and refuses
# bad input with a clear error. Usage: strata_gpt_cli.sh PATH/TO/strata-gpt WORK_DIR
set -euo pipefail
gpt=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# the calibration cache of this run's programs: the test's own, not the user's ~/.cache
export XDG_CACHE_HOME="$work/cache"
machines="$(cd "$(dirname "$0")/../../machines" && pwd)"

for i in $(seq 1 60); do echo "the quick brown fox jumps over the lazy dog number $i."; done > "$work/data.txt"
common=(--data "$work/data.txt" --n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch 2 --eval-every 2 --eval-batches 2)

# a full run of 4 steps, and the same run stopped after step 2 and resumed: the losses must be identical
"$gpt" train "${common[@]}" --steps 4 --out "$work/full" --metrics "$work/full.jsonl" > "$work/full.log"
"$gpt" train "${common[@]}" --steps 4 --stop-at 2 --out "$work/half" --metrics "$work/half.jsonl" > /dev/null
"$gpt" train "${common[@]}" --steps 4 --out "$work/half" --metrics "$work/half.jsonl" --resume "$work/half/step-000002" > /dev/null
[[ -d "$work/full/step-000004" && -f "$work/full/step-000004/model.safetensors" ]] || fail "no checkpoint written"
[[ -f "$work/full/loss.svg" ]] || fail "no loss curve"
grep -q '"val_loss"' "$work/full.jsonl" || fail "no val_loss in metrics"
for key in step loss lr grad_norm tokens_per_s; do grep -q "\"$key\"" "$work/full.jsonl" || fail "metrics lack $key"; done
full_losses=$(grep -o '"loss":[^,}]*' "$work/full.jsonl")
half_losses=$(grep -o '"loss":[^,}]*' "$work/half.jsonl")
[[ "$full_losses" == "$half_losses" ]] || fail "resumed losses differ:\n$full_losses\n---\n$half_losses"

# --plan prints the plan (placement, homes, kept activations) and trains nothing
"$gpt" train "${common[@]}" --steps 4 --out "$work/plan" --plan > "$work/plan.log"
grep -q "memory plan: resident placement" "$work/plan.log" || fail "--plan: $(cat "$work/plan.log")"
grep -q "activations device: 1 of 1 blocks keep theirs" "$work/plan.log" || fail "--plan shows no activation policy: $(cat "$work/plan.log")"
ls "$work/plan" 2>/dev/null | grep -q '^step-' && fail "--plan wrote a checkpoint"
# every placement and activation policy gives the full run's losses bit for bit: resident with
# activations recomputed; streamed through the device slots with a small --device-budget, the
# AdamW moments on storage (--state-on-storage, files in --storage-dir), a Perfetto --trace, and stopped + resumed
"$gpt" train "${common[@]}" --steps 4 --activations recompute --out "$work/recompute" --metrics "$work/recompute.jsonl" \
  > "$work/recompute.log"
grep -q "0 of 1 blocks keep theirs" "$work/recompute.log" || fail "--activations recompute: $(head -8 "$work/recompute.log")"
[[ "$(grep -o '"loss":[^,}]*' "$work/recompute.jsonl")" == "$full_losses" ]] || fail "recomputed activations changed the losses"
# offload with room on the device: the block keeps its activations, nothing goes to the host
# (tests/plan and tests/model check offloading itself, bit for bit)
"$gpt" train "${common[@]}" --steps 4 --activations offload --out "$work/offload" --metrics "$work/offload.jsonl" \
  > "$work/offload.log"
grep -q "1 of 1 blocks keep theirs" "$work/offload.log" || fail "--activations offload: $(head -8 "$work/offload.log")"
[[ "$(grep -o '"loss":[^,}]*' "$work/offload.jsonl")" == "$full_losses" ]] || fail "--activations offload changed the losses"
# --storage-dir alone only says where storage files go: the host holds this model's state
"$gpt" train "${common[@]}" --placement streamed --device-budget 4M --storage-dir "$work/storage" --steps 4 \
  --out "$work/dir-only" --plan > "$work/dir-only.log"
grep -q "memory plan: streamed placement" "$work/dir-only.log" || fail "--storage-dir --plan: $(cat "$work/dir-only.log")"
grep -q "on storage" "$work/dir-only.log" && fail "--storage-dir alone moved state to storage: $(cat "$work/dir-only.log")"
streamed=(--placement streamed --device-budget 4M --storage-dir "$work/storage" --state-on-storage)
"$gpt" train "${common[@]}" "${streamed[@]}" --steps 4 --out "$work/streamed" --metrics "$work/streamed.jsonl" \
  --trace "$work/streamed-trace.json" > "$work/streamed.log"
grep -q "memory plan: streamed placement" "$work/streamed.log" || fail "not streamed: $(head -8 "$work/streamed.log")"
grep -q "AdamW m, v on storage" "$work/streamed.log" || fail "moments not on storage: $(head -8 "$work/streamed.log")"
[[ "$(grep -o '"loss":[^,}]*' "$work/streamed.jsonl")" == "$full_losses" ]] || fail "streamed losses differ from resident"
grep -q '"bytes_storage_read":[1-9]' "$work/streamed.jsonl" || fail "no storage traffic in the streamed metrics"
grep -q '"bytes_h2d":[1-9]' "$work/streamed.jsonl" || fail "no H2D traffic in the streamed metrics"
grep -q '"traceEvents"' "$work/streamed-trace.json" || fail "--trace wrote no Perfetto trace"
for track in H2D compute D2H optimizer; do
  grep -q "\"$track\"" "$work/streamed-trace.json" || fail "the trace has no $track track"
done
"$gpt" train "${common[@]}" "${streamed[@]}" --steps 4 --stop-at 2 --out "$work/streamed-half" \
  --metrics "$work/streamed-half.jsonl" > /dev/null
"$gpt" train "${common[@]}" "${streamed[@]}" --steps 4 --out "$work/streamed-half" --metrics "$work/streamed-half.jsonl" \
  --resume "$work/streamed-half" > /dev/null
[[ "$(grep -o '"loss":[^,}]*' "$work/streamed-half.jsonl")" == "$full_losses" ]] || fail "streamed resume differs"
cmp -s "$work/full/step-000004/model.safetensors" "$work/streamed-half/step-000004/model.safetensors" ||
  fail "the streamed, resumed run's weights differ from the resident run's"
# --optimizer sgd: SGD with momentum, whose plan names its one state tensor; streamed with the
# momentum on storage, stopped and resumed, it gives the resident SGD run's losses bit for bit; a
# resume of it with AdamW is refused
sgd=(--optimizer sgd --momentum 0.8 --lr 0.05)
"$gpt" train "${common[@]}" "${sgd[@]}" --steps 4 --out "$work/sgd" --metrics "$work/sgd.jsonl" > "$work/sgd.log"
grep -q "^SGD momentum" "$work/sgd.log" || fail "--optimizer sgd: no SGD row in the plan: $(head -12 "$work/sgd.log")"
sgd_losses=$(grep -o '"loss":[^,}]*' "$work/sgd.jsonl")
[[ "$sgd_losses" != "$full_losses" ]] || fail "--optimizer sgd trained as AdamW did"
"$gpt" train "${common[@]}" "${sgd[@]}" "${streamed[@]}" --steps 4 --stop-at 2 --out "$work/sgd-half" \
  --metrics "$work/sgd-half.jsonl" > "$work/sgd-half.log"
grep -q "host, SGD momentum on storage" "$work/sgd-half.log" || fail "SGD momentum not on storage: $(head -8 "$work/sgd-half.log")"
"$gpt" train "${common[@]}" "${sgd[@]}" "${streamed[@]}" --steps 4 --out "$work/sgd-half" --metrics "$work/sgd-half.jsonl" \
  --resume "$work/sgd-half" > /dev/null
[[ "$(grep -o '"loss":[^,}]*' "$work/sgd-half.jsonl")" == "$sgd_losses" ]] || fail "streamed, resumed SGD differs from resident"
if "$gpt" train "${common[@]}" --optimizer adamw --lr 0.05 --steps 4 --out "$work/sgd-half" --resume "$work/sgd-half/step-000002" \
  2> "$work/sgd-adamw.err" > /dev/null; then
  fail "an SGD run resumed with AdamW"
fi
grep -q -- '--optimizer "sgd" -> "adamw"' "$work/sgd-adamw.err" || fail "SGD resumed as AdamW: $(cat "$work/sgd-adamw.err")"
# --optimizer adafactor: its plan row names its factored state; streamed with the state on storage,
# stopped and resumed, it gives the resident Adafactor run's losses bit for bit; its flags are checked
ada=(--optimizer adafactor --lr 0.01 --weight-decay 0.01)
"$gpt" train "${common[@]}" "${ada[@]}" --steps 4 --out "$work/ada" --metrics "$work/ada.jsonl" > "$work/ada.log"
grep -q "^Adafactor row_var, col_var, variance" "$work/ada.log" || fail "--optimizer adafactor: no Adafactor row in the plan: $(head -12 "$work/ada.log")"
ada_losses=$(grep -o '"loss":[^,}]*' "$work/ada.jsonl")
[[ "$ada_losses" != "$full_losses" && "$ada_losses" != "$sgd_losses" ]] || fail "--optimizer adafactor trained as another optimizer did"
"$gpt" train "${common[@]}" "${ada[@]}" "${streamed[@]}" --steps 4 --stop-at 2 --out "$work/ada-half" \
  --metrics "$work/ada-half.jsonl" > /dev/null
"$gpt" train "${common[@]}" "${ada[@]}" "${streamed[@]}" --steps 4 --out "$work/ada-half" --metrics "$work/ada-half.jsonl" \
  --resume "$work/ada-half" > /dev/null
[[ "$(grep -o '"loss":[^,}]*' "$work/ada-half.jsonl")" == "$ada_losses" ]] || fail "streamed, resumed Adafactor differs from resident"
if "$gpt" train "${common[@]}" "${ada[@]}" --update-clip 0.5 --steps 1 --out "$work/ada-bad" 2> "$work/ada-bad.err" > /dev/null; then
  fail "--update-clip 0.5 accepted"
fi
grep -q -- "--update-clip" "$work/ada-bad.err" || fail "--update-clip 0.5: $(cat "$work/ada-bad.err")"

# --gpus 2 (on the CPU backend: two ranks as threads), each rank on its own micro-batch: the step's
# global batch is --accum 2's on one device, so the losses agree to FP32 reduction-order rounding
# (1e-6 relative); the plan names the ranks; streamed, stopped and resumed it continues bitwise;
# a resume with another --gpus is refused
"$gpt" train "${common[@]}" --accum 2 --steps 4 --out "$work/accum2" --metrics "$work/accum2.jsonl" > /dev/null
"$gpt" train "${common[@]}" --gpus 2 --steps 4 --out "$work/dp" --metrics "$work/dp.jsonl" > "$work/dp.log"
grep -q "data parallel: 2 ranks" "$work/dp.log" || fail "--gpus 2: no ranks in the plan: $(head -12 "$work/dp.log")"
paste <(grep -o '"loss":[^,}]*' "$work/accum2.jsonl" | cut -d: -f2) <(grep -o '"loss":[^,}]*' "$work/dp.jsonl" | cut -d: -f2) |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad = 1; n++ } END { exit !(n == 4 && !bad) }' ||
  fail "--gpus 2 losses differ from --accum 2's beyond 1e-6:\n$(grep -o '"loss":[^,}]*' "$work/accum2.jsonl")\n---\n$(grep -o '"loss":[^,}]*' "$work/dp.jsonl")"
"$gpt" train "${common[@]}" "${streamed[@]}" --gpus 2 --steps 4 --out "$work/dp-streamed" --metrics "$work/dp-streamed.jsonl" > /dev/null
"$gpt" train "${common[@]}" "${streamed[@]}" --gpus 2 --steps 4 --stop-at 2 --out "$work/dp-half" --metrics "$work/dp-half.jsonl" > /dev/null
"$gpt" train "${common[@]}" "${streamed[@]}" --gpus 2 --steps 4 --out "$work/dp-half" --metrics "$work/dp-half.jsonl" \
  --resume "$work/dp-half" > /dev/null
[[ "$(grep -o '"loss":[^,}]*' "$work/dp-half.jsonl")" == "$(grep -o '"loss":[^,}]*' "$work/dp-streamed.jsonl")" ]] ||
  fail "--gpus 2 streamed, stopped and resumed, differs from the run in one go"
if "$gpt" train "${common[@]}" --gpus 1 --steps 4 --out "$work/dp" --resume "$work/dp/step-000004" 2> "$work/dp-one.err" > /dev/null; then
  fail "a --gpus 2 run resumed on one rank"
fi
grep -q -- '--gpus 2 -> 1' "$work/dp-one.err" || fail "--gpus change not named: $(cat "$work/dp-one.err")"

if "$gpt" train "${common[@]}" --steps 1 --device-budget 64K --out "$work/nofit" 2> "$work/nofit.err"; then
  fail "a device budget too small for any plan was accepted"
fi
grep -q "does not fit" "$work/nofit.err" || fail "--device-budget 64K: $(cat "$work/nofit.err")"

# sampling prints the prompt and continues it
out=$("$gpt" sample --checkpoint "$work/full/step-000004" --prompt "the quick" --max-new-tokens 20 --seed 3)
out_full=$out
[[ "$out" == "the quick"* && ${#out} -gt 9 ]] || fail "sample output: $out"
again=$("$gpt" sample --checkpoint "$work/full/step-000004" --prompt "the quick" --max-new-tokens 20 --seed 3)
[[ "$out" == "$again" ]] || fail "sampling is not deterministic for a seed"

# LoRA: adapters only, on a new text, from the trained checkpoint; stopped and resumed gives the
# same losses; export merges them into a plain GPT-2 checkpoint that samples
for i in $(seq 1 60); do echo "a slow green turtle walks under the bright moon, step $i."; done > "$work/new.txt"
lora=(--data "$work/new.txt" --init-from "$work/full/step-000004" --lora-rank 2 --seq-len 16 --batch 2 --eval-every 0 --steps 4)
"$gpt" train "${lora[@]}" --out "$work/lora" --metrics "$work/lora.jsonl" > "$work/lora.log"
grep -q "trainable, the rest frozen" "$work/lora.log" || fail "the LoRA plan does not show the trainable parameters"
[[ -f "$work/lora/step-000004/adapters.safetensors" && ! -f "$work/lora/step-000004/model.safetensors" ]] \
  || fail "a LoRA checkpoint holds the adapters, not the whole model"
"$gpt" train "${lora[@]}" --stop-at 2 --out "$work/lora-half" --metrics "$work/lora-half.jsonl" > /dev/null
"$gpt" train "${lora[@]}" --out "$work/lora-half" --metrics "$work/lora-half.jsonl" --resume "$work/lora-half/step-000002" > /dev/null
[[ "$(grep -o '"loss":[^,}]*' "$work/lora.jsonl")" == "$(grep -o '"loss":[^,}]*' "$work/lora-half.jsonl")" ]] \
  || fail "resumed LoRA losses differ"
"$gpt" export --adapters "$work/lora/step-000004" --out "$work/merged" > /dev/null
[[ -f "$work/merged/model.safetensors" && -f "$work/merged/config.json" ]] || fail "export wrote no GPT-2 checkpoint"
out=$("$gpt" sample --checkpoint "$work/merged" --prompt "a slow" --max-new-tokens 10 --seed 3)
[[ "$out" == "a slow"* ]] || fail "sample of the merged model: $out"
if "$gpt" train --data "$work/new.txt" --lora-rank 2 --steps 1 --out "$work/nolora" 2> "$work/err3.txt"; then
  fail "--lora-rank without --init-from accepted"
fi
grep -q -- "--init-from" "$work/err3.txt" || fail "LoRA without a base: $(cat "$work/err3.txt")"

# errors: an unknown flag is named; bad data is named; nothing crashes
if "$gpt" train --data "$work/data.txt" --bogus-flag 2> "$work/err.txt"; then fail "unknown flag accepted"; fi
grep -q -- "--bogus-flag" "$work/err.txt" || fail "unknown flag not named: $(cat "$work/err.txt")"
echo '{"text": "unterminated' > "$work/bad.jsonl"
if "$gpt" train --data "$work/bad.jsonl" --steps 1 --out "$work/bad" 2> "$work/err2.txt"; then fail "bad JSON accepted"; fi
grep -q "bad.jsonl" "$work/err2.txt" || fail "bad data file not named: $(cat "$work/err2.txt")"
# ---- issue 14: what a careless or hostile user does ----
tiny=(--data "$work/data.txt" --n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch 2 --eval-every 0)
# refuses: the command must fail and its stderr must contain the text
refuses() {
  local expect=$1
  shift
  if "$@" > "$work/refused.out" 2> "$work/refused.err"; then fail "accepted: $*"; fi
  grep -q -- "$expect" "$work/refused.err" || fail "'$*': no '$expect' in: $(cat "$work/refused.err")"
}

# a device as --data is refused before it is read (/dev/zero grew memory without end, /dev/urandom
# never finished); timeout: a regression fails here instead of hanging
refuses "data file /dev/zero is not a regular file" \
  timeout 60 "$gpt" train --data /dev/zero --n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch 2 --steps 2 --out "$work/zero"

# --version: the project's version
"$gpt" --version | grep -Eq '^strata-gpt [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version: $("$gpt" --version 2>&1)"

# --config: options from a TOML file, the command line wins; unknown keys, bad values, missing files fail
printf 'steps = 3\nn-layer = 1\nn-head = 2\nn-embd = 16\nseq-len = 16\nbatch = 2\neval-every = 0\n' > "$work/c.toml"
"$gpt" train --data "$work/data.txt" --config "$work/c.toml" --out "$work/cfg" > "$work/cfg.log"
[[ -d "$work/cfg/step-000003" ]] || fail "--config steps = 3 ignored: $(ls "$work/cfg")"
grep -q "1 layers, 2 heads, 16 channels" "$work/cfg.log" || fail "--config n-layer ignored: $(grep model: "$work/cfg.log")"
printf '[train]\nsteps = 2\n' > "$work/c2.toml"
"$gpt" train "${tiny[@]}" --config "$work/c2.toml" --steps 1 --out "$work/cfg2" > /dev/null
[[ -d "$work/cfg2/step-000001" && ! -d "$work/cfg2/step-000002" ]] || fail "the command line does not win over --config"
"$gpt" train "${tiny[@]}" --config "$work/c2.toml" --out "$work/cfg3" > /dev/null
[[ -d "$work/cfg3/step-000002" ]] || fail "[train] section of --config ignored"
printf 'stepz = 3\n' > "$work/bad.toml"
refuses "unknown key 'stepz'" "$gpt" train "${tiny[@]}" --config "$work/bad.toml" --out "$work/x"
printf 'steps = -3\n' > "$work/bad2.toml"
refuses "not in range" "$gpt" train "${tiny[@]}" --config "$work/bad2.toml" --out "$work/x"
refuses "nonexistent.toml" "$gpt" train "${tiny[@]}" --config "$work/nonexistent.toml" --out "$work/x"
head -c 200 "$gpt" > "$work/garbage.toml"
refuses "garbage.toml" "$gpt" train "${tiny[@]}" --config "$work/garbage.toml" --out "$work/x"

# negative or absurd numbers: a clear error naming the flag, never a wrapped 2^64 - 1
for bad in "--n-layer -1" "--batch -1" "--accum -1" "--seq-len -1" "--steps 0" "--lr nan" "--lr -1" "--clip -1" \
           "--eval-batches 0" "--warmup -1" "--eval-every -1" "--save-every -1" "--seed -1" "--lora-rank -1"; do
  read -r flag value <<< "$bad"
  refuses "$flag" timeout 20 "$gpt" train "${tiny[@]}" --steps 2 "$flag" "$value" --out "$work/x"
done
refuses "--stop-at" "$gpt" train "${tiny[@]}" --steps 2 --stop-at 0 --out "$work/x"
refuses "--stop-at 5" "$gpt" train "${tiny[@]}" --steps 2 --stop-at 5 --out "$work/x"
refuses "--threads 100000" "$gpt" train "${tiny[@]}" --steps 2 --threads 100000 --out "$work/x"
refuses "--max-new-tokens" timeout 20 "$gpt" sample --checkpoint "$work/full/step-000004" --prompt x --max-new-tokens -5
refuses "--top-k" timeout 20 "$gpt" sample --checkpoint "$work/full/step-000004" --prompt x --top-k -1
refuses "--device must be cpu, cuda or auto" timeout 20 "$gpt" sample --checkpoint "$work/full/step-000004" --prompt x --device tpu
refuses "--device-budget" "$gpt" train "${tiny[@]}" --steps 2 --device-budget nan --out "$work/x"
# a library error names its settings; the program shows its own flags for them
refuses "the flags for that: --batch, --seq-len" "$gpt" train "${tiny[@]}" --steps 2 --device-budget 64K --out "$work/x"
[[ ! -e "$work/x/step-000002" ]] || fail "a refused run wrote a checkpoint"

# outputs that would destroy inputs, or a file strata did not write, are refused
cp "$work/data.txt" "$work/data.bak"
refuses "is the --data input" "$gpt" train "${tiny[@]}" --steps 1 --metrics "$work/data.txt" --out "$work/x"
refuses "is the --data input" "$gpt" train "${tiny[@]}" --steps 1 --trace "$work/data.txt" --out "$work/x"
refuses "is the --init-from input" "$gpt" train "${lora[@]}" --metrics "$work/full/step-000004/config.json" --out "$work/x"
cmp -s "$work/data.txt" "$work/data.bak" || fail "the data file was changed"
echo "my notes" > "$work/notes.txt"
refuses "refusing to replace it" "$gpt" train "${tiny[@]}" --steps 1 --metrics "$work/notes.txt" --out "$work/x"
[[ "$(cat "$work/notes.txt")" == "my notes" ]] || fail "a file that is not a metrics file was overwritten"
refuses "refusing to replace it" "$gpt" train "${tiny[@]}" --steps 1 --metrics "$work/notes.txt" --out "$work/ow" --overwrite
[[ "$(cat "$work/notes.txt")" == "my notes" ]] || fail "--overwrite let --metrics replace a file strata did not write"
"$gpt" train "${tiny[@]}" --steps 1 --metrics "$work/notes.txt" --out "$work/ow" --metrics-append > /dev/null
[[ "$(head -n 1 "$work/notes.txt")" == "my notes" ]] && grep -q '"loss"' "$work/notes.txt" ||
  fail "--metrics-append did not add to the file: $(cat "$work/notes.txt")"

# --out: a fresh run refuses another run's checkpoints; --overwrite replaces them; --resume continues
refuses "holds checkpoints of another run" "$gpt" train "${tiny[@]}" --steps 2 --seed 7 --out "$work/full"
[[ -d "$work/full/step-000004" ]] || fail "a refused run removed checkpoints"
"$gpt" train "${tiny[@]}" --steps 2 --out "$work/cfg3" --overwrite > "$work/ow.log"
grep -q "removed 1 checkpoint" "$work/ow.log" || fail "--overwrite: $(cat "$work/ow.log")"
# an unwritable --out is found before step 1 (/proc/self exists and takes no files, even for root)
refuses "is not writable" "$gpt" train "${tiny[@]}" --steps 2 --out /proc/self --metrics "$work/unwritable.jsonl"
[[ ! -s "$work/unwritable.jsonl" ]] || fail "an unwritable --out was found only after training"

# resume: the run's own options (or explicitly others, with a warning); not with --init-from
refuses "--lr 0.001 -> 0.01" "$gpt" train "${common[@]}" --steps 4 --lr 0.01 --out "$work/half" --resume "$work/half/step-000002"
refuses "--accum 1 -> 2" "$gpt" train "${common[@]}" --steps 4 --accum 2 --out "$work/half" --resume "$work/half/step-000002"
refuses "--resume and --init-from" "$gpt" train "${common[@]}" --steps 4 --out "$work/half" \
  --resume "$work/half/step-000002" --init-from "$work/full/step-000004"
"$gpt" train "${common[@]}" --steps 4 --lr 0.01 --out "$work/changed" --allow-option-changes \
  --resume "$work/half/step-000002" > "$work/changed.log"
grep -q "warning: .*--lr 0.001 -> 0.01" "$work/changed.log" || fail "no warning of the changed options: $(cat "$work/changed.log")"

# the latest complete checkpoint is named by OUT/latest; sample and --resume take the run directory
[[ "$(cat "$work/full/latest")" == "step-000004" ]] || fail "OUT/latest: $(cat "$work/full/latest" 2>&1)"
[[ "$("$gpt" sample --checkpoint "$work/full" --prompt "the quick" --max-new-tokens 20 --seed 3)" == "$out_full" ]] ||
  fail "sample of the run directory is not that of its latest checkpoint"
# the loss curve of a resumed run shows the whole run (4 steps), not only the resumed ones
points=$(grep -o '<polyline id="train"[^>]*points="[^"]*"' "$work/half/loss.svg" | grep -o ',' | wc -l)
[[ "$points" == 4 ]] || fail "loss.svg of the resumed run has $points points, not 4"

# stale temporaries of a killed run are removed at start; a second run on a locked --out is refused;
# SIGTERM saves the step, writes latest and stops cleanly (no temporaries), and the run resumes
# (2000 steps: enough to be stopped midway; all its checkpoints must fit on the disk, checked first)
mkdir -p "$work/sig/step-000002.tmp-2147483646/junk"
"$gpt" train "${tiny[@]}" --steps 2000 --save-every 1 --out "$work/sig" --metrics "$work/sig.jsonl" > "$work/sig.log" &
pid=$!
trap 'kill "$pid" 2> /dev/null || true' EXIT  # a failed check must not leave the run behind
for _ in $(seq 1 600); do [[ -s "$work/sig/latest" ]] && break; sleep 0.05; done
[[ -s "$work/sig/latest" ]] || fail "the background run saved nothing: $(cat "$work/sig.log")"
[[ ! -e "$work/sig/step-000002.tmp-2147483646" ]] || fail "a stale temporary checkpoint was not removed"
refuses "in use by another run (pid $pid)" "$gpt" train "${tiny[@]}" --steps 2 --out "$work/sig"
# its metrics file is locked too: a second run appending to it would interleave with it
refuses "being written by another run" "$gpt" train "${tiny[@]}" --steps 2 --out "$work/sig2" --metrics "$work/sig.jsonl" \
  --metrics-append
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ "$rc" == 143 ]] || fail "SIGTERM: exit code $rc, not 143: $(tail -3 "$work/sig.log")"
grep -q "stopped by SIGTERM" "$work/sig.log" || fail "SIGTERM not reported: $(tail -3 "$work/sig.log")"
ls "$work/sig" | grep -q tmp && fail "SIGTERM left temporaries: $(ls "$work/sig")"
last=$(cat "$work/sig/latest")
[[ -f "$work/sig/$last/trainer_state.json" ]] || fail "latest names no complete checkpoint: $last"
[[ "$last" == "$(ls "$work/sig" | grep '^step-' | LC_ALL=C sort | tail -n 1)" ]] || fail "latest is not the last checkpoint"

# a diverging run (lr 100) saves no checkpoint past the policy (3 x its first loss) and says so
refuses "diverged" "$gpt" train "${tiny[@]}" --steps 30 --lr 100 --warmup 0 --save-every 5 --out "$work/diverge" \
  --metrics "$work/diverge.jsonl"
for ckpt in "$work"/diverge/step-*; do
  [[ -e "$ckpt" ]] || continue
  loss=$(grep -o '"first_loss":[^,}]*' "$ckpt/trainer_state.json" | cut -d: -f2)
  step=$((10#${ckpt##*step-}))
  saved=$(grep "\"step\":$step," "$work/diverge.jsonl" | grep -o '"loss":[^,}]*' | cut -d: -f2)
  awk -v l="$saved" -v f="$loss" 'BEGIN { exit !(l <= 3 * f) }' || fail "$ckpt saved with loss $saved (first $loss)"
done
# export replaces --out whole: never its base or adapters, nor a directory it did not write
refuses "is or holds the --base input" "$gpt" export --adapters "$work/lora/step-000004" --out "$work/full/step-000004"
[[ -f "$work/full/step-000004/optimizer.safetensors" ]] || fail "export replaced its base"
refuses "is or holds the --adapters input" "$gpt" export --adapters "$work/lora/step-000004" --out "$work/lora"
refuses "not a merge strata-gpt export wrote" "$gpt" export --adapters "$work/lora/step-000004" --out "$work/cfg"
"$gpt" export --adapters "$work/lora/step-000004" --out "$work/merged" > /dev/null || fail "a second export over the first"

# ---- issue 13: checkpoints that the disk can hold (--save full|weights|none) ----
# a full checkpoint says its moments are saved; the plan of the checkpoints is printed before step 1
grep -q '"moments_saved": true' "$work/full/step-000004/trainer_state.json" || fail "a full checkpoint does not record its moments"
grep -q "checkpoints: --save full, 1 x .* in $work/full" "$work/full.log" || fail "no checkpoint plan printed: $(head -12 "$work/full.log")"
# none: no checkpoint at all (no step directory, no latest), and the last line says so
"$gpt" train "${tiny[@]}" --steps 3 --save none --out "$work/save-none" > "$work/save-none.log"
ls "$work/save-none" | grep -q '^step-' && fail "--save none wrote a checkpoint: $(ls "$work/save-none")"
[[ ! -e "$work/save-none/latest" ]] || fail "--save none wrote OUT/latest"
tail -n 1 "$work/save-none.log" | grep -q "no checkpoint saved (--save none)" ||
  fail "--save none: the last line is: $(tail -n 1 "$work/save-none.log")"
refuses "--save none with --save-every 1" "$gpt" train "${tiny[@]}" --steps 2 --save none --save-every 1 --out "$work/x"
refuses "--save none with --stop-at 1" "$gpt" train "${tiny[@]}" --steps 2 --save none --stop-at 1 --out "$work/x"
refuses "--save: half not in {full,weights,none}" "$gpt" train "${tiny[@]}" --steps 2 --save half --out "$work/x"
# weights: the model and the trainer state, no optimizer state (here AdamW's moments); a resume
# says the optimizer starts afresh and trains on with finite losses
"$gpt" train "${tiny[@]}" --steps 4 --stop-at 2 --save weights --out "$work/save-w" --metrics "$work/save-w.jsonl" \
  > "$work/save-w.log"
wckpt="$work/save-w/step-000002"
[[ -f "$wckpt/model.safetensors" && -f "$wckpt/config.json" && -f "$wckpt/trainer_state.json" ]] ||
  fail "--save weights: $(ls "$wckpt")"
[[ ! -e "$wckpt/optimizer.safetensors" ]] || fail "--save weights wrote AdamW's moments"
grep -q '"moments_saved": false' "$wckpt/trainer_state.json" || fail "--save weights: the state does not say the moments are missing"
grep -q "(weights only: no optimizer state)" "$work/save-w.log" || fail "--save weights: $(tail -2 "$work/save-w.log")"
"$gpt" train "${tiny[@]}" --steps 4 --save weights --out "$work/save-w" --resume "$wckpt" --metrics "$work/save-w.jsonl" \
  > "$work/save-w2.log"
grep -q "resumed from $wckpt at step 2" "$work/save-w2.log" || fail "weights resume: $(tail -5 "$work/save-w2.log")"
grep -q "without AdamW's moments (--save weights): the optimizer starts afresh (moments at zero" "$work/save-w2.log" ||
  fail "a resume from a weights-only checkpoint does not say the optimizer starts afresh: $(grep -A1 resumed "$work/save-w2.log")"
[[ -d "$work/save-w/step-000004" ]] || fail "the weights-only resume saved nothing"
# with SGD the optimizer state left out is the momentum, and the resume's note says that
"$gpt" train "${tiny[@]}" "${sgd[@]}" --steps 4 --stop-at 2 --save weights --out "$work/save-w-sgd" > "$work/save-w-sgd.log"
grep -q "(weights only: no optimizer state)" "$work/save-w-sgd.log" || fail "SGD --save weights: $(tail -2 "$work/save-w-sgd.log")"
"$gpt" train "${tiny[@]}" "${sgd[@]}" --steps 4 --save weights --out "$work/save-w-sgd" --resume "$work/save-w-sgd" \
  > "$work/save-w-sgd2.log"
grep -q "without SGD's momentum (--save weights): the optimizer starts afresh (momentum at zero" "$work/save-w-sgd2.log" ||
  fail "an SGD resume from a weights-only checkpoint: $(grep -A1 resumed "$work/save-w-sgd2.log")"
for step in 3 4; do
  loss=$(grep "\"step\":$step," "$work/save-w.jsonl" | grep -o '"loss":[^,}]*' | cut -d: -f2)
  awk -v l="$loss" 'BEGIN { exit !(l + 0 == l && l > 0 && l < 100) }' || fail "step $step after a weights-only resume: loss '$loss'"
done
# the space check: every checkpoint a run writes is kept, so a billion --save-every 1 checkpoints
# cannot fit anywhere: refused before step 1, naming the bytes needed and free and the choices
refuses "will not fit in '$work/huge': 1000000000 checkpoints of" \
  "$gpt" train "${tiny[@]}" --steps 1000000000 --save-every 1 --out "$work/huge" --metrics "$work/huge.jsonl"
for choice in "another --out" "--save weights" "--save none" "a larger --save-every"; do
  grep -q -- "$choice" "$work/refused.err" || fail "the refusal does not offer '$choice': $(cat "$work/refused.err")"
done
grep -q "are free there" "$work/refused.err" || fail "the refusal does not name the free bytes: $(cat "$work/refused.err")"
[[ ! -s "$work/huge.jsonl" ]] || fail "the space check ran after step 1"
ls "$work/huge" | grep -q '^step-' && fail "a refused run wrote a checkpoint"

# the demo script: flags given override its defaults (--steps twice was an error), its run
# directory's latest checkpoint is sampled; twice in a row works (a new demo replaces the last,
# and leaves a file of the user's in the run directory alone)
demo="$(dirname "$0")/../../scripts/train-demo.sh"
demo_flags=(--n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch 2 --eval-every 0)
for steps in 3 4; do
  STRATA_DEMO_GPT="$gpt" STRATA_DEMO_OUT="$work/demo" bash "$demo" --steps $steps "${demo_flags[@]}" > "$work/demo.log" 2>&1 ||
    fail "train-demo.sh (--steps $steps): $(tail -5 "$work/demo.log")"
  echo "mine" > "$work/demo/notes.txt"
done
grep -q "sample from $work/demo/step-000004" "$work/demo.log" || fail "the demo sampled another checkpoint: $(tail -5 "$work/demo.log")"
grep -q "^This License" "$work/demo.log" || fail "the demo printed no sample: $(tail -3 "$work/demo.log")"
[[ ! -e "$work/demo/step-000003" && ! -e "$work/demo.next" && "$(cat "$work/demo/notes.txt")" == mine ]] ||
  fail "the second demo did not replace the first alone: $(ls -a "$work/demo" "$work/demo.next" 2>&1)"
# the demo ends with where strata-gpt is (it is not on PATH) and the next commands
grep -q "strata-gpt is $(realpath "$gpt") " "$work/demo.log" || fail "the demo does not say where strata-gpt is: $(tail -5 "$work/demo.log")"
grep -q "$(realpath "$gpt") sample --checkpoint $work/demo " "$work/demo.log" || fail "the demo does not print the next commands"
# a new demo that fails after saving a checkpoint (a loss that diverges) leaves the previous demo
# whole: it trains beside it and replaces it only once finished (--overwrite deleted it up front)
STRATA_DEMO_GPT="$gpt" STRATA_DEMO_OUT="$work/demo" bash "$demo" --steps 8 --save-every 1 --lr 1e6 "${demo_flags[@]}" \
  > "$work/demo-fail.log" 2>&1 && fail "a diverging demo succeeded: $(tail -3 "$work/demo-fail.log")"
[[ "$(cat "$work/demo/latest")" == step-000004 && -f "$work/demo/step-000004/model.safetensors" ]] ||
  fail "a failed new demo destroyed the previous one: $(ls "$work/demo") $(tail -3 "$work/demo-fail.log")"
# a model that learned its text continues a prompt with it (greedy: --temperature 0)
"$gpt" train --data "$work/data.txt" --n-layer 2 --n-head 2 --n-embd 32 --seq-len 32 --batch 4 --steps 150 --lr 1e-2 \
  --eval-every 0 --save-every 0 --out "$work/learn" > "$work/learn.log" || fail "learning run: $(tail -3 "$work/learn.log")"
cont=$("$gpt" sample --checkpoint "$work/learn" --prompt "the quick brown" --max-new-tokens 24 --temperature 0)
[[ "$cont" == "the quick brown fox jumps over the lazy"* ]] || fail "greedy continuation of a learned text: $cont"
# --device cpu gives the same greedy text (with a GPU, the default above ran on CUDA: the acceptance
# check that generation on the GPU is the CPU's)
cpu_cont=$("$gpt" sample --checkpoint "$work/learn" --prompt "the quick brown" --max-new-tokens 24 --temperature 0 --device cpu)
[[ "$cpu_cont" == "$cont" ]] || fail "greedy continuation on --device cpu '$cpu_cont' differs from the default device's '$cont'"
# a Hugging Face tokenizer.json (hf:DIR): the checkpoint keeps it, records the kind, and sample
# finds it again; a tokenizer.json strata does not implement is refused naming the field
hf_fixtures="$(cd "$(dirname "$0")/../fixtures/hf_tokenizers" && pwd)"
"$gpt" train "${common[@]}" --steps 2 --tokenizer "hf:$hf_fixtures/llama3" --out "$work/hf" > /dev/null
[[ -f "$work/hf/step-000002/tokenizer.json" ]] || fail "the hf: checkpoint has no tokenizer.json"
grep -q '"tokenizer": "hf"' "$work/hf/step-000002/trainer_state.json" || fail "trainer_state.json does not say hf"
out=$("$gpt" sample --checkpoint "$work/hf/step-000002" --prompt "the quick" --max-new-tokens 5 --seed 3)
[[ "$out" == "the quick"* ]] || fail "sample with the hf: tokenizer: $out"
# chat records with a chat template (examples/llama's CLI test checks the rest of --chat-template)
for i in $(seq 1 20); do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Say $i.\"}, {\"role\": \"assistant\", \"content\": \"$i\"}]}"
done > "$work/chat.jsonl"
"$gpt" train --data "$work/chat.jsonl" --n-layer 1 --n-head 2 --n-embd 16 --seq-len 48 --batch 2 --eval-every 0 --steps 1 --tokenizer "hf:$hf_fixtures/qwen2" \
  --chat-template "$hf_fixtures/../chat_templates/qwen2.5.jinja" --out "$work/chat" > "$work/chat.log"
grep -q "chat data (chat template): 20 records" "$work/chat.log" || fail "strata-gpt chat data: $(grep -E 'data:|chat' "$work/chat.log")"
sed 's/"type": *"NFC"/"type": "NFKC"/' "$hf_fixtures/qwen2/tokenizer.json" > "$work/nfkc.json"
refuses 'normalizer.type = "NFKC" is not supported' "$gpt" train "${common[@]}" --steps 1 --tokenizer "hf:$work/nfkc.json" --out "$work/x"
refuses "unknown tokenizer 'sentencepiece:x'" "$gpt" train "${common[@]}" --steps 1 --tokenizer sentencepiece:x --out "$work/x"

# ---- issue 26: nothing a user owns is destroyed ----
gpt_abs=$(cd "$(dirname "$gpt")" && pwd)/$(basename "$gpt")
w=$(cd "$work" && pwd)
one=(--data "$w/data.txt" --n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch 2 --eval-every 0)
two=(--data "$w/data.txt" --n-layer 2 --n-head 2 --n-embd 16 --seq-len 16 --batch 2 --eval-every 0)
# 1. a resume continues in its run's directory: without --out, not the default runs/gpt (where
#    another run may live); an --out holding another run's checkpoints is refused, and so are this
#    run's past the resumed step unless --overwrite
"$gpt" train "${one[@]}" --steps 4 --stop-at 2 --out "$w/r1" > /dev/null
"$gpt" train "${two[@]}" --steps 4 --out "$w/victim" > /dev/null
cp "$w/victim/step-000004/model.safetensors" "$w/victim.model"
mkdir -p "$w/cwd"
(cd "$w/cwd" && "$gpt_abs" train "${one[@]}" --steps 4 --resume "$w/r1/step-000002" > "$w/r1-resume.log") ||
  fail "resume without --out: $(tail -3 "$w/r1-resume.log")"
[[ ! -e "$w/cwd/runs" ]] || fail "a resume without --out wrote into the default runs/gpt"
[[ -d "$w/r1/step-000004" ]] || fail "a resume without --out did not continue in its run's directory: $(ls "$w/r1")"
refuses "holds checkpoints of another run" "$gpt" train "${one[@]}" --steps 4 --resume "$w/r1/step-000002" --out "$w/victim"
cmp -s "$w/victim/step-000004/model.safetensors" "$w/victim.model" || fail "a resume replaced another run's checkpoint"
refuses "past the resumed step (step-000004)" "$gpt" train "${one[@]}" --steps 4 --resume "$w/r1/step-000002"
"$gpt" train "${one[@]}" --steps 4 --resume "$w/r1/step-000002" --overwrite > /dev/null || fail "--overwrite on a resume"
# 2. --metrics: never a file that is not provably this run's, an input (a hard link is the same
#    file), or one of the run's own files in --out
for i in $(seq 1 40); do echo "{\"instruction\": \"say $i\", \"input\": \"\", \"output\": \"$i\"}"; done > "$w/instr.jsonl"
cp "$w/instr.jsonl" "$w/instr.bak"
refuses "refusing to replace it" "$gpt" train "${one[@]}" --steps 1 --metrics "$w/instr.jsonl" --out "$w/m1"
cmp -s "$w/instr.jsonl" "$w/instr.bak" || fail "--metrics destroyed a JSONL dataset"
for i in $(seq 1 40); do echo "{\"text\": \"the quick brown fox $i jumps over the lazy dog\"}"; done > "$w/docs.jsonl"
cp "$w/docs.jsonl" "$w/docs.bak"
ln "$w/docs.jsonl" "$w/hard.jsonl"
refuses "is the --data input" "$gpt" train "${one[@]/$w\/data.txt/$w/docs.jsonl}" --steps 1 --metrics "$w/hard.jsonl" --out "$w/m2"
cmp -s "$w/docs.jsonl" "$w/docs.bak" || fail "--metrics through a hard link destroyed the data"
for own in loss.svg latest .lock; do
  refuses "one of the files the run writes" "$gpt" train "${one[@]}" --steps 1 --metrics "$w/m3/$own" --out "$w/m3"
done
# a resume appends to the metrics file its run recorded, and refuses another
"$gpt" train "${one[@]}" --steps 4 --stop-at 2 --out "$w/m4" --metrics "$w/m4.jsonl" > /dev/null
echo '{"step": 1, "loss": 0}' > "$w/other.jsonl"
refuses "not the metrics file of the resumed run" "$gpt" train "${one[@]}" --steps 4 --resume "$w/m4" --metrics "$w/other.jsonl"
"$gpt" train "${one[@]}" --steps 4 --resume "$w/m4" --metrics "$w/m4.jsonl" > /dev/null
[[ $(grep -c '"loss"' "$w/m4.jsonl") == 4 ]] || fail "the resumed run did not append to its metrics: $(cat "$w/m4.jsonl")"
# ... and --overwrite replaces the metrics file of the run it replaces (provably strata's)
"$gpt" train "${one[@]}" --steps 2 --out "$w/m4" --metrics "$w/m4.jsonl" --overwrite > /dev/null
[[ $(grep -c '"loss"' "$w/m4.jsonl") == 2 ]] || fail "--overwrite did not replace the replaced run's metrics"
# 3. --overwrite validates everything first and removes only at the first save, only strata's checkpoints
"$gpt" train "${one[@]}" --steps 2 --out "$w/o1" > /dev/null
echo '{"text": "unterminated' > "$w/bad26.jsonl"
refuses "bad26.jsonl" "$gpt" train "${one[@]/$w\/data.txt/$w/bad26.jsonl}" --steps 2 --out "$w/o1" --overwrite
refuses "head" "$gpt" train --data "$w/data.txt" --n-layer 1 --n-head 3 --n-embd 16 --seq-len 16 --batch 2 --steps 2 \
  --out "$w/o1" --overwrite
refuses "warmup" "$gpt" train "${one[@]}" --warmup 5 --steps 2 --out "$w/o1" --overwrite
[[ -f "$w/o1/step-000002/model.safetensors" ]] || fail "--overwrite removed checkpoints before its run was validated"
mkdir -p "$w/o1/step-000009" && echo "my notes" > "$w/o1/step-000009/notes.txt"
refuses "step-000009' is not a checkpoint" "$gpt" train "${one[@]}" --steps 2 --out "$w/o1" --overwrite
[[ -f "$w/o1/step-000009/notes.txt" && -d "$w/o1/step-000002" ]] || fail "--overwrite removed a directory of the user's"
rm -r "$w/o1/step-000009"
# 4. a side output never costs the training: --trace is checked before step 1; a metrics file that
#    fails (a full disk: /dev/full) is dropped with a warning while the run trains and saves on
for trace in "$w/no-such-dir/trace.json" /proc/self/trace.json; do
  refuses "does not exist\|cannot be written" "$gpt" train "${one[@]}" --steps 4 --out "$w/t1" --trace "$trace" \
    --metrics "$w/t1.jsonl"
  [[ ! -s "$w/t1.jsonl" ]] || fail "--trace $trace was found unwritable only after training"
done
"$gpt" train "${one[@]}" --steps 3 --out "$w/full-disk" --metrics /dev/full > "$w/full-disk.log" 2> "$w/full-disk.err" ||
  fail "a failing metrics file stopped the run: $(tail -3 "$w/full-disk.log") $(cat "$w/full-disk.err")"
[[ -d "$w/full-disk/step-000003" ]] || fail "a failing metrics file lost the run's checkpoint"
grep -q "warning: the metrics: metrics: writing to '/dev/full' failed" "$w/full-disk.err" ||
  fail "the lost metrics were not reported: $(cat "$w/full-disk.err")"
# 6. files of the user's in --out named as strata's (latest, loss.svg, .lock) are never overwritten
for own in latest loss.svg .lock; do
  mkdir -p "$w/u-$own" && echo "my $own notes" > "$w/u-$own/$own"
  refuses "is not .* strata wrote" "$gpt" train "${one[@]}" --steps 1 --out "$w/u-$own"
  [[ "$(cat "$w/u-$own/$own")" == "my $own notes" ]] || fail "the user's $own in --out was overwritten"
done
# 7. a checkpoint is what it recorded: a model file from another step, an edited step, other data of
#    the same length and an impossible first_loss are refused before any training
"$gpt" train "${one[@]}" --steps 6 --stop-at 4 --save-every 2 --out "$w/c7" > /dev/null
cp -r "$w/c7" "$w/c7-model" && cp "$w/c7/step-000002/model.safetensors" "$w/c7-model/step-000004/"
refuses "is not the file this checkpoint saved" "$gpt" train "${one[@]}" --steps 6 --resume "$w/c7-model/step-000004"
cp -r "$w/c7" "$w/c7-step" && sed -i 's/"step": 4,/"step": 3,/' "$w/c7-step/step-000004/trainer_state.json"
refuses "says step 3" "$gpt" train "${one[@]}" --steps 6 --resume "$w/c7-step/step-000004"
cp -r "$w/c7" "$w/c7-loss" && sed -i 's/"first_loss": [^,]*,/"first_loss": -1.0,/' "$w/c7-loss/step-000004/trainer_state.json"
refuses "first_loss -1.0 is no loss" "$gpt" train "${one[@]}" --steps 6 --resume "$w/c7-loss/step-000004"
[[ ! -e "$w/c7-loss/step-000006" ]] || fail "an impossible first_loss was caught only after training"
tr 'a-z' 'b-za' < "$w/data.txt" > "$w/data-same-length.txt"
refuses "is not the data" "$gpt" train "${one[@]/$w\/data.txt/$w/data-same-length.txt}" --steps 6 --resume "$w/c7/step-000004"
# 8. messages: a directory without a complete checkpoint says so; an unknown command, a value that
#    is no number, a parser error: the program's prefix and exit code 2; no command: the usage; a
#    resume takes the run's recorded options (and data, and shape) for the flags not given
mkdir -p "$w/k4/step-000002.tmp-99999"
refuses "no checkpoint here" "$gpt" train "${one[@]}" --steps 2 --resume "$w/k4"
grep -q "first" "$work/refused.err" && fail "a directory that exists is said to need creating: $(cat "$work/refused.err")"
mkdir -p "$w/k5" && cp -r "$w/c7/step-000002" "$w/k5/" && : > "$w/k5/latest"
refuses "its 'latest' file is empty" "$gpt" sample --checkpoint "$w/k5" --prompt x
usage_rc() { local rc=0; "$@" > "$work/usage.out" 2> "$work/usage.err" || rc=$?; echo "$rc"; }
[[ $(usage_rc "$gpt" frobnicate) == 2 ]] && grep -q "^strata-gpt: error: unknown command 'frobnicate'" "$work/usage.err" ||
  fail "unknown command: $(cat "$work/usage.err")"
[[ $(usage_rc "$gpt" train "${one[@]}" --lr abc) == 2 ]] && grep -q "^strata-gpt: error: --lr: 'abc' is not a number" "$work/usage.err" ||
  fail "--lr abc: $(cat "$work/usage.err")"
[[ $(usage_rc "$gpt" train --bogus-flag) == 2 ]] && grep -q "^strata-gpt: error: .*--bogus-flag" "$work/usage.err" ||
  fail "a parser error: $(cat "$work/usage.err")"
[[ $(usage_rc "$gpt") == 2 ]] && grep -q "Subcommands:" "$work/usage.out" && grep -q "train" "$work/usage.out" ||
  fail "strata-gpt alone: $(cat "$work/usage.out" "$work/usage.err")"
"$gpt" train --data "$w/data.txt" --n-layer 1 --n-head 2 --n-embd 16 --seq-len 16 --batch 3 --lr 0.002 --eval-every 0 \
  --steps 4 --stop-at 2 --out "$w/rec" > /dev/null
"$gpt" train --resume "$w/rec" > "$w/rec.log" 2>&1 || fail "a resume with no flag: $(tail -3 "$w/rec.log")"
[[ -d "$w/rec/step-000004" ]] || fail "a resume with no flag did not continue the run: $(ls "$w/rec")"
refuses "--seq-len 16 -> 32" "$gpt" train --resume "$w/rec/step-000002" --seq-len 32 --out "$w/rec-other"
# 13. one spelling per idea: sample takes --threads and --tokens (strata-llama's); export follows latest
"$gpt" sample --checkpoint "$w/r1" --prompt "the" --tokens 3 --threads 1 > /dev/null || fail "sample --tokens --threads"
"$gpt" export --adapters "$work/lora" --out "$w/merged-latest" > /dev/null || fail "export --adapters of a run directory"
[[ -f "$w/merged-latest/model.safetensors" ]] || fail "export --adapters OUT did not follow latest"
# the machine a plan is for: this one, calibrated once (the cache, keyed by the machine, is read
# afterwards); every step's metrics record its measured time
grep -q "^machine: this one, calibrated" "$work/plan.log" || fail "--plan names no machine: $(head -8 "$work/plan.log")"
ls "$XDG_CACHE_HOME"/strata/calibration-*.json > /dev/null 2>&1 || fail "no calibration cache in $XDG_CACHE_HOME/strata"
grep -q '"step_seconds":' "$work/full.jsonl" || fail "the metrics record no step_seconds"
cache_file=$(ls "$XDG_CACHE_HOME"/strata/calibration-*.json)
before=$(grep -o '"h2d_GBps": [^,]*' "$cache_file")
"$gpt" train "${common[@]}" --plan --out "$work/plan" > /dev/null
[[ "$(grep -o '"h2d_GBps": [^,]*' "$cache_file")" == "$before" ]] || fail "a second --plan measured again instead of reading the cache"
"$gpt" train "${common[@]}" --plan --recalibrate --out "$work/plan" > /dev/null
[[ "$(grep -o '"h2d_GBps": [^,]*' "$cache_file")" != "$before" ]] || fail "--recalibrate did not measure again"
# an unwritable cache is a note, and the plan is still made
XDG_CACHE_HOME="$work/data.txt" "$gpt" train "${common[@]}" --plan --out "$work/plan" > "$work/nocache.log" 2> "$work/nocache.err" ||
  fail "an unwritable calibration cache stopped --plan: $(cat "$work/nocache.err")"
grep -q "cannot write the cache" "$work/nocache.err" || fail "no note of the unwritable cache: $(cat "$work/nocache.err")"
# --machine FILE plans for another machine without allocating: a 120B GPT on the 1.5 TB host
# (its budgets from the file), and with this box's file, refused naming the tiers over budget;
# training with --machine is refused; a malformed machine file is refused naming the field
big=(--data "$work/data.txt" --n-layer 96 --n-head 80 --n-embd 10240 --seq-len 1024 --batch 4)
"$gpt" train "${big[@]}" --machine "$machines/h200-1.5tb-4nvme.json" --plan --out "$work/big" > "$work/big.log"
grep -q "^machine: h200-1.5tb-4nvme (--machine .*; planned, nothing allocated)" "$work/big.log" || fail "--machine: $(head -6 "$work/big.log")"
grep -q "memory plan: streamed placement" "$work/big.log" || fail "--machine 120B not streamed: $(cat "$work/big.log")"
grep -Eq "^budget +132.00 GiB +1.35 TiB +20.00 TiB" "$work/big.log" || fail "--machine's budgets not used: $(cat "$work/big.log")"
# the file's attention rate for the model's head size: 128 (10240 / 80) here, 64 for the XL shape
grep -q "^machine: .*attention 26 TFLOP/s" "$work/big.log" || fail "--machine: not head size 128's attention rate: $(head -3 "$work/big.log")"
"$gpt" train --data "$work/data.txt" --n-layer 48 --n-head 25 --n-embd 1600 --seq-len 1024 --batch 1 \
  --machine "$machines/h200.json" --plan --out "$work/xl" > "$work/xl.log"
grep -q "^machine: .*attention 51 TFLOP/s" "$work/xl.log" || fail "--machine: not head size 64's attention rate: $(head -3 "$work/xl.log")"
[[ -e "$work/big" ]] && fail "--machine --plan created its --out"
refuses "memory plan: streamed placement with" "$gpt" train "${big[@]}" --machine "$machines/h200.json" --plan --out "$work/big"
grep -q "host needs" "$work/refused.err" || fail "the 120B refusal on h200.json names no tier: $(cat "$work/refused.err")"
"$gpt" train "${big[@]}" --machine "$machines/h200.json" --host-budget 1400G --storage-budget 4T --plan --out "$work/big" > "$work/big-flags.log"
grep -Eq "^budget +132.00 GiB +1.37 TiB +4.00 TiB" "$work/big-flags.log" || fail "budget flags do not override --machine's: $(cat "$work/big-flags.log")"
refuses "training runs on this one, so --machine only plans" "$gpt" train "${common[@]}" --machine "$machines/h200.json" --out "$work/x"
sed -E 's/"h2d_GBps": [0-9.]+/"h2d_GBps": "fast"/' "$machines/h200.json" > "$work/bad-machine.json"
refuses "field 'h2d_GBps' is a string" "$gpt" train "${common[@]}" --machine "$work/bad-machine.json" --plan --out "$work/x"
grep -v '"d2h_GBps"' "$machines/h200.json" > "$work/bad-machine.json"
refuses "field 'd2h_GBps' is missing" "$gpt" train "${common[@]}" --machine "$work/bad-machine.json" --plan --out "$work/x"
echo "strata-gpt CLI: all checks passed"
