#!/usr/bin/env bash
# End-to-end: strata-gpt trains a tiny model on a shipped text, resumes, samples, and refuses
# bad input with a clear error. Usage: strata_gpt_cli.sh PATH/TO/strata-gpt WORK_DIR
set -euo pipefail
gpt=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

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
# AdamW moments on storage (--storage-dir), a Perfetto --trace, and stopped + resumed
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
streamed=(--placement streamed --device-budget 4M --storage-dir "$work/storage")
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
if "$gpt" train "${common[@]}" --lr 0.05 --steps 4 --out "$work/sgd-half" --resume "$work/sgd-half/step-000002" \
  2> "$work/sgd-adamw.err" > /dev/null; then
  fail "an SGD run resumed with AdamW"
fi
grep -q -- '--optimizer "sgd" -> "adamw"' "$work/sgd-adamw.err" || fail "SGD resumed as AdamW: $(cat "$work/sgd-adamw.err")"

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
if "$gpt" train "${common[@]}" --steps 4 --out "$work/dp" --resume "$work/dp/step-000004" 2> "$work/dp-one.err" > /dev/null; then
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
refuses "refusing to overwrite" "$gpt" train "${tiny[@]}" --steps 1 --metrics "$work/notes.txt" --out "$work/x"
[[ "$(cat "$work/notes.txt")" == "my notes" ]] || fail "a file that is not a metrics file was overwritten"
"$gpt" train "${tiny[@]}" --steps 1 --metrics "$work/notes.txt" --out "$work/ow" --overwrite > /dev/null
grep -q '"loss"' "$work/notes.txt" || fail "--overwrite did not let --metrics replace the file"

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
echo "strata-gpt CLI: all checks passed"
