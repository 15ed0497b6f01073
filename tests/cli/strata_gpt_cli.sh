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

# sampling prints the prompt and continues it
out=$("$gpt" sample --checkpoint "$work/full/step-000004" --prompt "the quick" --max-new-tokens 20 --seed 3)
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
echo "strata-gpt CLI: all checks passed"
