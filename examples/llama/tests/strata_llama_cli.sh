#!/usr/bin/env bash
# End-to-end: strata-llama trains a tiny model on a shipped text resident and streamed (the same
# losses, bit for bit in the metrics), writes a Hugging Face Llama checkpoint, resumes from it as if
# never stopped, samples from it, starts a new run from it (--init-from), and refuses bad input
# with a clear error.
# Usage: strata_llama_cli.sh PATH/TO/strata-llama WORK_DIR
set -euo pipefail
llama=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# the calibration cache of this run's programs: the test's own, not the user's ~/.cache
export XDG_CACHE_HOME="$work/cache"
machines="$(cd "$(dirname "$0")/../../../machines" && pwd)"

for i in $(seq 1 60); do echo "the quick brown fox jumps over the lazy dog number $i."; done > "$work/data.txt"
common=(--data "$work/data.txt" --n-layer 2 --n-head 2 --n-embd 16 --hidden 24 --seq-len 16 --batch 2 --accum 2
        --steps 4 --eval-every 2 --eval-batches 2 --device cpu)

"$llama" train "${common[@]}" --placement resident --out "$work/resident" --metrics "$work/resident.jsonl" > "$work/resident.log"
"$llama" train "${common[@]}" --placement streamed --out "$work/streamed" --metrics "$work/streamed.jsonl" > "$work/streamed.log"
"$llama" train "${common[@]}" --placement streamed --moments storage --storage-dir "$work/storage" \
  --out "$work/storage-run" --metrics "$work/storage.jsonl" > "$work/storage.log"
grep -q "resident placement" "$work/resident.log" || fail "resident run did not plan resident: $(cat "$work/resident.log")"
grep -q "streamed placement" "$work/streamed.log" || fail "streamed run did not plan streamed: $(cat "$work/streamed.log")"
grep -q "AdamW m, v on storage" "$work/storage.log" || fail "--moments storage did not put m on storage: $(cat "$work/storage.log")"
ckpt="$work/resident/step-000004"
for f in model.safetensors config.json optimizer.safetensors trainer_state.json; do
  [[ -f "$ckpt/$f" ]] || fail "checkpoint lacks $f"
done
[[ -f "$work/resident/loss.svg" ]] || fail "no loss curve"
grep -q '"LlamaForCausalLM"' "$ckpt/config.json" || fail "config.json is not a LlamaForCausalLM config"
grep -q '"val_loss"' "$work/resident.jsonl" || fail "no val_loss in metrics"
for key in step loss lr grad_norm tokens_per_s; do grep -q "\"$key\"" "$work/resident.jsonl" || fail "metrics lack $key"; done
grep -q '"bytes_h2d"' "$work/streamed.jsonl" || fail "streamed metrics lack bytes_h2d"
losses() { grep -o '"\(loss\|grad_norm\|val_loss\)":[^,}]*' "$1"; }
[[ "$(losses "$work/resident.jsonl")" == "$(losses "$work/streamed.jsonl")" ]] ||
  fail "streamed losses differ from resident:\n$(losses "$work/resident.jsonl")\n---\n$(losses "$work/streamed.jsonl")"
[[ "$(losses "$work/resident.jsonl")" == "$(losses "$work/storage.jsonl")" ]] || fail "moments on storage changed the losses"
cmp -s "$ckpt/model.safetensors" "$work/streamed/step-000004/model.safetensors" || fail "streamed weights differ from resident"
# --trace (strata::run_training's, as strata-gpt's): a Perfetto trace of steps 2-3; a streamed run's
# metrics say how much transfer compute hid; a second run may replace the trace strata wrote (not
# the first run's metrics file, which is no file of the second run's)
for run in 1 2; do
  "$llama" train "${common[@]}" --placement streamed --out "$work/traced-$run" --trace "$work/trace.json" \
    --metrics "$work/traced-$run.jsonl" > /dev/null || fail "--trace (run $run)"
done
grep -q '"traceEvents"' "$work/trace.json" || fail "--trace wrote no Perfetto trace"
grep -q '"transfer_hidden_fraction"' "$work/traced-2.jsonl" || fail "a streamed run's metrics lack transfer_hidden_fraction"
[[ "$(losses "$work/resident.jsonl")" == "$(losses "$work/traced-2.jsonl")" ]] || fail "tracing changed the losses"

# the resident run stopped after step 2 and resumed (from the streamed run's format: the same files)
"$llama" train "${common[@]}" --placement resident --stop-at 2 --out "$work/half" --metrics "$work/half.jsonl" > /dev/null
"$llama" train "${common[@]}" --placement streamed --out "$work/half" --metrics "$work/half.jsonl" \
  --resume "$work/half/step-000002" > "$work/resumed.log"
grep -q "resumed from" "$work/resumed.log" || fail "no resume: $(cat "$work/resumed.log")"
[[ "$(losses "$work/resident.jsonl")" == "$(losses "$work/half.jsonl")" ]] ||
  fail "resumed losses differ:\n$(losses "$work/resident.jsonl")\n---\n$(losses "$work/half.jsonl")"
cmp -s "$ckpt/model.safetensors" "$work/half/step-000004/model.safetensors" || fail "resumed weights differ"
# --optimizer sgd (examples/common, as strata-gpt): SGD with momentum, whose plan names its one
# state tensor; streamed with the momentum on storage, stopped and resumed, it gives the resident
# SGD run's losses and weights bit for bit; a resume of it with AdamW is refused
sgd=(--optimizer sgd --momentum 0.8 --lr 0.05)
"$llama" train "${common[@]}" "${sgd[@]}" --placement resident --out "$work/sgd" --metrics "$work/sgd.jsonl" > "$work/sgd.log"
grep -q "^SGD momentum" "$work/sgd.log" || fail "--optimizer sgd: no SGD row in the plan: $(head -12 "$work/sgd.log")"
grep -q '"name": "sgd"' "$work/sgd/step-000004/trainer_state.json" || fail "the SGD checkpoint does not name its optimizer"
[[ "$(losses "$work/sgd.jsonl")" != "$(losses "$work/resident.jsonl")" ]] || fail "--optimizer sgd trained as AdamW did"
sgd_streamed=(--placement streamed --moments storage --storage-dir "$work/sgd-storage")
"$llama" train "${common[@]}" "${sgd[@]}" "${sgd_streamed[@]}" --stop-at 2 --out "$work/sgd-half" \
  --metrics "$work/sgd-half.jsonl" > "$work/sgd-half.log"
grep -q "SGD momentum on storage" "$work/sgd-half.log" || fail "SGD momentum not on storage: $(head -12 "$work/sgd-half.log")"
"$llama" train "${common[@]}" "${sgd[@]}" "${sgd_streamed[@]}" --out "$work/sgd-half" --metrics "$work/sgd-half.jsonl" \
  --resume "$work/sgd-half" > /dev/null
[[ "$(losses "$work/sgd-half.jsonl")" == "$(losses "$work/sgd.jsonl")" ]] || fail "streamed, resumed SGD differs from resident"
cmp -s "$work/sgd/step-000004/model.safetensors" "$work/sgd-half/step-000004/model.safetensors" ||
  fail "the streamed, resumed SGD run's weights differ from the resident run's"
if "$llama" train "${common[@]}" --optimizer adamw --lr 0.05 --out "$work/sgd-half" --resume "$work/sgd-half/step-000002" \
  2> "$work/sgd-adamw.err" > /dev/null; then
  fail "an SGD run resumed with AdamW"
fi
grep -q -- '--optimizer "sgd" -> "adamw"' "$work/sgd-adamw.err" || fail "SGD resumed as AdamW: $(cat "$work/sgd-adamw.err")"

# sampling prints the prompt and continues it, the same for a seed
out=$("$llama" sample --checkpoint "$ckpt" --prompt "the quick" --tokens 20 --seed 3 --device cpu)
[[ "$out" == "the quick"* && ${#out} -gt 9 ]] || fail "sample output: $out"
again=$("$llama" sample --checkpoint "$ckpt" --prompt "the quick" --tokens 20 --seed 3 --device cpu)
[[ "$out" == "$again" ]] || fail "sampling is not deterministic for a seed"

# the checkpoint means the same model to Hugging Face: a model that has learned the text continues
# it greedily the same way without strata (transformers when installed, else a plain-Python
# restatement of HF's Llama forward reading model.safetensors and config.json)
"$llama" train --data "$work/data.txt" --n-layer 2 --n-head 2 --n-embd 32 --hidden 64 --seq-len 32 --batch 4 \
  --steps 200 --lr 1e-2 --warmup 10 --eval-every 0 --device cpu --out "$work/learned" > /dev/null
learned="$work/learned/step-000200"
ours=$("$llama" sample --checkpoint "$learned" --prompt "the quick" --tokens 30 --temperature 0 --device cpu)
[[ "$ours" == "the quick brown fox jumps over the lazy" ]] || fail "the model did not learn the text: '$ours'"
if command -v python3 > /dev/null; then
  tool="$(dirname "$0")/../tools/hf_llama_greedy.py"
  hf=$(python3 "$tool" "$learned" "the quick" 30 2> "$work/hf.txt") || fail "hf_llama_greedy.py: $(cat "$work/hf.txt")"
  [[ "$hf" == "$ours" ]] || fail "greedy continuations differ: HF '$hf', strata '$ours' ($(cat "$work/hf.txt"))"
  echo "HF greedy check: $(cat "$work/hf.txt")"
else
  echo "SKIPPED: the HF greedy check needs python3"
fi

# a new run from the checkpoint's weights and shape (--n-layer etc. come from its config.json)
"$llama" train --data "$work/data.txt" --init-from "$ckpt" --seq-len 16 --batch 2 --steps 1 --eval-every 0 \
  --device cpu --out "$work/init" > "$work/init.log"
grep -q "2 layers, 2 heads, 16 channels, hidden 24" "$work/init.log" || fail "--init-from did not take the shape: $(cat "$work/init.log")"

# errors: an unknown flag is named; a bad shape and a non-Llama directory are refused with a reason
if "$llama" train --data "$work/data.txt" --bogus-flag 2> "$work/err.txt"; then fail "unknown flag accepted"; fi
grep -q -- "--bogus-flag" "$work/err.txt" || fail "unknown flag not named: $(cat "$work/err.txt")"
if "$llama" train --data "$work/data.txt" --n-embd 16 --n-head 3 --steps 1 --device cpu --out "$work/bad" 2> "$work/err2.txt" > /dev/null; then fail "n-embd 16 with 3 heads accepted"; fi
grep -q "heads of an even size" "$work/err2.txt" || fail "bad shape not explained: $(cat "$work/err2.txt")"
if "$llama" sample --checkpoint "$work" --prompt x 2> "$work/err3.txt" > /dev/null; then fail "a directory without a model accepted"; fi
grep -q "no checkpoint here" "$work/err3.txt" || fail "missing checkpoint not explained: $(cat "$work/err3.txt")"
# ---- issue 14: the checks strata-gpt has (examples/common), here too ----
tiny=(--data "$work/data.txt" --n-layer 1 --n-head 2 --n-embd 16 --hidden 24 --seq-len 16 --batch 2 --eval-every 0 --device cpu)
refuses() {
  local expect=$1
  shift
  if "$@" > "$work/refused.out" 2> "$work/refused.err"; then fail "accepted: $*"; fi
  grep -q -- "$expect" "$work/refused.err" || fail "'$*': no '$expect' in: $(cat "$work/refused.err")"
}
"$llama" --version | grep -Eq '^strata-llama [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version: $("$llama" --version 2>&1)"
printf 'steps = 2\n' > "$work/c.toml"
"$llama" train "${tiny[@]}" --config "$work/c.toml" --out "$work/cfg" > /dev/null
[[ -d "$work/cfg/step-000002" && "$(cat "$work/cfg/latest")" == "step-000002" ]] || fail "--config steps = 2 ignored, or no latest"
printf 'stepz = 2\n' > "$work/bad.toml"
refuses "unknown key 'stepz'" "$llama" train "${tiny[@]}" --config "$work/bad.toml" --out "$work/x"
for bad in "--n-layer -1" "--hidden -1" "--batch -1" "--clip -1" "--eval-batches 0" "--warmup -1" "--norm-eps -1"; do
  read -r flag value <<< "$bad"
  refuses "$flag" timeout 20 "$llama" train "${tiny[@]}" --steps 2 "$flag" "$value" --out "$work/x"
done
refuses "--max-new-tokens" timeout 20 "$llama" sample --checkpoint "$ckpt" --prompt x --tokens -5 --device cpu
refuses "--stop-at 5" "$llama" train "${tiny[@]}" --steps 2 --stop-at 5 --out "$work/x"
refuses "is the --data input" "$llama" train "${tiny[@]}" --steps 1 --metrics "$work/data.txt" --out "$work/x"
refuses "holds checkpoints of another run" "$llama" train "${tiny[@]}" --steps 2 --out "$work/cfg"
refuses "--lr 0.001 -> 0.01" "$llama" train "${common[@]}" --lr 0.01 --out "$work/half" --resume "$work/half/step-000002"
refuses "is not writable" "$llama" train "${tiny[@]}" --steps 2 --out /proc/self
# the loss curve of the resumed run (stopped at 2 of 4) shows all 4 steps
points=$(grep -o '<polyline id="train"[^>]*points="[^"]*"' "$work/half/loss.svg" | grep -o ',' | wc -l)
[[ "$points" == 4 ]] || fail "loss.svg of the resumed run has $points points, not 4"
# a second run on a locked --out is refused naming the holder; SIGINT saves and stops cleanly
"$llama" train "${tiny[@]}" --steps 2000 --save-every 1 --out "$work/sig" > "$work/sig.log" &
pid=$!
trap 'kill "$pid" 2> /dev/null || true' EXIT  # a failed check must not leave the run behind
for _ in $(seq 1 600); do [[ -s "$work/sig/latest" ]] && break; sleep 0.05; done
refuses "in use by another run (pid $pid)" "$llama" train "${tiny[@]}" --steps 2 --out "$work/sig"
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
[[ "$rc" == 130 ]] || fail "SIGINT: exit code $rc, not 130: $(tail -3 "$work/sig.log")"
ls "$work/sig" | grep -q tmp && fail "SIGINT left temporaries: $(ls "$work/sig")"
[[ -f "$work/sig/$(cat "$work/sig/latest")/trainer_state.json" ]] || fail "latest names no complete checkpoint"
# --save (examples/common, as strata-gpt): none writes no checkpoint and says so last; weights has no
# optimizer state and its resume says the optimizer starts afresh; checkpoints that cannot fit are refused
"$llama" train "${tiny[@]}" --steps 2 --save none --out "$work/save-none" > "$work/save-none.log"
ls "$work/save-none" | grep -q '^step-' && fail "--save none wrote a checkpoint: $(ls "$work/save-none")"
tail -n 1 "$work/save-none.log" | grep -q "no checkpoint saved (--save none)" || fail "--save none: $(tail -n 1 "$work/save-none.log")"
refuses "--save none with --save-every 1" "$llama" train "${tiny[@]}" --steps 2 --save none --save-every 1 --out "$work/x"
"$llama" train "${tiny[@]}" --steps 3 --stop-at 1 --save weights --out "$work/save-w" > /dev/null
[[ -f "$work/save-w/step-000001/model.safetensors" && ! -e "$work/save-w/step-000001/optimizer.safetensors" ]] ||
  fail "--save weights: $(ls "$work/save-w/step-000001")"
"$llama" train "${tiny[@]}" --steps 3 --save weights --out "$work/save-w" --resume "$work/save-w" > "$work/save-w.log"
grep -q "the optimizer starts afresh" "$work/save-w.log" || fail "weights-only resume: $(tail -5 "$work/save-w.log")"
[[ -d "$work/save-w/step-000003" ]] || fail "the weights-only resume saved nothing"
refuses "checkpoints of" "$llama" train "${tiny[@]}" --steps 1000000000 --save-every 1 --out "$work/huge"
grep -q -- "--save weights" "$work/refused.err" || fail "no choices in the refusal: $(cat "$work/refused.err")"
# ---- issue 16: the Llama family's shapes: grouped-query attention, a head size of its own, an untied head ----
family=(--data "$work/data.txt" --n-layer 1 --n-embd 16 --hidden 24 --seq-len 16 --batch 2 --eval-every 0 --device cpu)
"$llama" train "${family[@]}" --n-head 4 --n-kv-head 2 --head-dim 6 --untied-head --steps 2 --out "$work/gqa" > "$work/gqa.log"
grep -q "4 heads (2 key/value) of 6, 16 channels" "$work/gqa.log" || fail "GQA shape not reported: $(grep model: "$work/gqa.log")"
gqa="$work/gqa/step-000002"
grep -q '"num_key_value_heads": 2' "$gqa/config.json" || fail "config.json lacks num_key_value_heads 2: $(cat "$gqa/config.json")"
grep -q '"head_dim": 6' "$gqa/config.json" || fail "config.json lacks head_dim 6"
grep -q '"tie_word_embeddings": false' "$gqa/config.json" || fail "config.json does not say the head is untied"
grep -q 'lm_head.weight' "$gqa/model.safetensors" || fail "an untied checkpoint without lm_head.weight"
"$llama" train --data "$work/data.txt" --init-from "$gqa" --seq-len 16 --batch 2 --steps 1 --eval-every 0 \
  --device cpu --out "$work/gqa-init" > "$work/gqa-init.log"
grep -q "1 layers, 4 heads (2 key/value) of 6, 16 channels" "$work/gqa-init.log" ||
  fail "--init-from a GQA checkpoint did not take its shape: $(grep model: "$work/gqa-init.log")"
"$llama" sample --checkpoint "$gqa" --prompt "the" --tokens 4 --device cpu > /dev/null || fail "sampling a GQA checkpoint"
# a learned GQA model with its own head size and an untied head means the same model to HF (the plain-
# Python forward reads num_key_value_heads, head_dim and lm_head.weight; transformers when installed)
"$llama" train --data "$work/data.txt" --n-layer 2 --n-head 4 --n-kv-head 2 --head-dim 10 --untied-head --n-embd 32 \
  --hidden 64 --seq-len 32 --batch 4 --steps 200 --lr 1e-2 --warmup 10 --eval-every 0 --device cpu \
  --out "$work/learned-gqa" > /dev/null
ours=$("$llama" sample --checkpoint "$work/learned-gqa/step-000200" --prompt "the quick" --tokens 30 --temperature 0 --device cpu)
[[ "$ours" == "the quick brown fox jumps over the lazy" ]] || fail "the GQA model did not learn the text: '$ours'"
# --device auto (CUDA where there is a GPU) generates the same greedy text as the CPU
auto_ours=$("$llama" sample --checkpoint "$work/learned-gqa/step-000200" --prompt "the quick" --tokens 30 --temperature 0 --device auto)
[[ "$auto_ours" == "$ours" ]] || fail "greedy text on --device auto '$auto_ours' differs from --device cpu's '$ours'"
if command -v python3 > /dev/null; then
  hf=$(python3 "$tool" "$work/learned-gqa/step-000200" "the quick" 30 2> "$work/hf-gqa.txt") ||
    fail "hf_llama_greedy.py (GQA): $(cat "$work/hf-gqa.txt")"
  [[ "$hf" == "$ours" ]] || fail "GQA greedy continuations differ: HF '$hf', strata '$ours' ($(cat "$work/hf-gqa.txt"))"
  echo "HF greedy check (GQA, head_dim 10, untied): $(cat "$work/hf-gqa.txt")"
fi
refuses "--n-kv-head 3 does not divide --n-head 4" "$llama" train "${family[@]}" --n-head 4 --n-kv-head 3 --steps 1 --out "$work/x"
refuses "--head-dim 5 is odd" "$llama" train "${tiny[@]}" --head-dim 5 --steps 1 --out "$work/x"
refuses "--n-kv-head" timeout 20 "$llama" train "${tiny[@]}" --n-kv-head -1 --steps 1 --out "$work/x"
# ---- issue 16: chat records with the model's chat template (--format chat, --chat-template) ----
fixtures="$(dirname "$0")/../../../tests/fixtures"
model="$work/chat-model"  # a Hugging Face tokenizer directory: tokenizer.json, tokenizer_config.json, chat_template.jinja
mkdir -p "$model"
cp "$fixtures/hf_tokenizers/llama3/tokenizer.json" "$model/"
cp "$fixtures/chat_templates/llama3.1.jinja" "$model/chat_template.jinja"
echo '{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}' > "$model/tokenizer_config.json"
for i in $(seq 1 30); do
  echo "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"What is $i + $i?\"}, {\"role\": \"assistant\", \"content\": \"$((2 * i)).\"}]}"
done > "$work/chat.jsonl"
for i in $(seq 1 30); do echo "{\"instruction\": \"Double $i.\", \"output\": \"$((2 * i))\"}"; done > "$work/instruct.jsonl"
chat=(--n-layer 1 --n-head 2 --n-embd 16 --hidden 24 --seq-len 128 --batch 2 --eval-every 0 --device cpu)
"$llama" train "${chat[@]}" --data "$work/chat.jsonl" --format chat --tokenizer "hf:$model" --steps 2 --out "$work/chat" > "$work/chat.log"
grep -q "chat template: $model/chat_template.jinja (bos_token \"<|begin_of_text|>\", eos_token \"<|eot_id|>\")" "$work/chat.log" ||
  fail "--chat-template auto did not find chat_template.jinja: $(head -5 "$work/chat.log")"
# each record trains only its answer ("N.": two to four tokens) and <|eot_id|>, not its ~70 tokens of context
grep -Eq "chat data \(chat template\): 30 records, [0-9]+ tokens, 30 sequences .*, (9[0-9]|1[0-4][0-9]) trainable targets" "$work/chat.log" ||
  fail "chat data summary: $(grep 'data:' "$work/chat.log")"
for f in tokenizer.json tokenizer_config.json chat_template.jinja; do
  [[ -f "$work/chat/step-000002/$f" ]] || fail "the chat checkpoint lacks $f"
done
# the run stopped and resumed: the checkpoint's tokenizer, template and token ids carry on
"$llama" train "${chat[@]}" --data "$work/chat.jsonl" --format chat --tokenizer "hf:$model" --steps 2 --stop-at 1 \
  --out "$work/chat-half" > /dev/null
"$llama" train "${chat[@]}" --data "$work/chat.jsonl" --format chat --steps 2 --resume "$work/chat-half" \
  --out "$work/chat-half" > "$work/chat-resume.log" || fail "resuming a chat run: $(tail -3 "$work/chat-resume.log")"
cmp -s "$work/chat/step-000002/model.safetensors" "$work/chat-half/step-000002/model.safetensors" ||
  fail "the resumed chat run differs from the uninterrupted one"
# instruction records: the Alpaca prompt unless a chat template is asked for
"$llama" train "${chat[@]}" --data "$work/instruct.jsonl" --tokenizer "hf:$model" --steps 1 --out "$work/alpaca" > "$work/alpaca.log"
grep -q "instruct data: 30 records" "$work/alpaca.log" || fail "instruction records without a template: $(grep 'data:' "$work/alpaca.log")"
"$llama" train "${chat[@]}" --data "$work/instruct.jsonl" --tokenizer "hf:$model" --chat-template auto --steps 1 \
  --out "$work/inst-chat" > "$work/inst-chat.log"
grep -q "instruct data (chat template): 30 records" "$work/inst-chat.log" || fail "instruction records with --chat-template auto: $(grep 'data:' "$work/inst-chat.log")"
"$llama" train "${chat[@]}" --data "$work/chat.jsonl" --tokenizer "hf:$fixtures/hf_tokenizers/llama3" \
  --chat-template "$fixtures/chat_templates/llama3.1.jinja" --steps 1 --out "$work/chat-file" > "$work/chat-file.log"
grep -q 'bos_token "<|begin_of_text|>"' "$work/chat-file.log" || fail "a .jinja alone did not take the tokenizer's BOS: $(grep 'chat template' "$work/chat-file.log")"
refuses "no chat template found in" "$llama" train "${chat[@]}" --data "$work/chat.jsonl" --tokenizer "hf:$fixtures/hf_tokenizers/llama3" --steps 1 --out "$work/x"
refuses "holds chat records" "$llama" train "${chat[@]}" --data "$work/chat.jsonl" --chat-template none --steps 1 --out "$work/x"
refuses "the data holds plain text records" "$llama" train "${tiny[@]}" --chat-template "$model/chat_template.jinja" --steps 1 --out "$work/x"
refuses "is not prefix-stable" "$llama" train "${chat[@]}" --data "$work/chat.jsonl" --tokenizer "hf:$fixtures/hf_tokenizers/mistral" \
  --chat-template "$fixtures/chat_templates/mistral-v0.3.jinja" --steps 1 --out "$work/x"
# q/k/v biases (a Qwen2 directory), a padded vocabulary (the end of text named in config.json), the
# plan alone, and the storage I/O engine chosen by flag
"$llama" train "${family[@]}" --n-head 4 --n-kv-head 2 --qkv-bias --vocab 300 --steps 1 --out "$work/qwen" > "$work/qwen.log"
grep -q '"Qwen2ForCausalLM"' "$work/qwen/step-000001/config.json" || fail "--qkv-bias did not write a Qwen2 config"
grep -q '"vocab_size": 300' "$work/qwen/step-000001/config.json" || fail "--vocab 300 not in config.json"
grep -q '"eos_token_id": 256' "$work/qwen/step-000001/config.json" || fail "config.json names the wrong end of text"
"$llama" train "${family[@]}" --n-head 4 --steps 1 --plan --out "$work/plan-only" > "$work/plan.log"
grep -q "memory plan" "$work/plan.log" || fail "--plan printed no plan"
grep -q "^step" "$work/plan.log" && fail "--plan trained"
"$llama" train "${family[@]}" --n-head 4 --steps 1 --placement streamed --moments storage --io-engine threads --io-workers 2 \
  --storage-dir "$work/io-storage" --out "$work/io" > /dev/null || fail "--io-engine threads"
refuses "--vocab 100 is smaller than the tokenizer's 257" "$llama" train "${family[@]}" --n-head 4 --vocab 100 --steps 1 --out "$work/x"
refuses "--io-engine" timeout 20 "$llama" train "${family[@]}" --n-head 4 --io-engine fast --steps 1 --out "$work/x"
# ---- export (a Hugging Face directory, no training state) and score (logits and loss to a file) ----
"$llama" export --checkpoint "$learned" --dtype bfloat16 --out "$work/export-bf16" > "$work/export.log" ||
  fail "export bfloat16: $(cat "$work/export.log")"
exp="$work/export-bf16"
[[ -f "$exp/model.safetensors" && -f "$exp/config.json" ]] || fail "export lacks files: $(ls "$exp")"
[[ ! -e "$exp/optimizer.safetensors" && ! -e "$exp/trainer_state.json" ]] || fail "export holds training state: $(ls "$exp")"
grep -q '"torch_dtype": "bfloat16"' "$exp/config.json" || fail "export config.json: $(grep dtype "$exp/config.json")"
grep -aq '"BF16"' "$exp/model.safetensors" || fail "export bfloat16 has no BF16 tensor"
grep -aq '"F32"' "$exp/model.safetensors" && fail "export bfloat16 kept F32 tensors"
"$llama" sample --checkpoint "$exp" --prompt "the quick" --tokens 8 --temperature 0 --device cpu > /dev/null ||
  fail "the bfloat16 export does not load back"
"$llama" export --checkpoint "$work/learned" --out "$work/export-f32" > /dev/null  # OUT: its latest checkpoint
cmp -s "$work/export-f32/model.safetensors" "$learned/model.safetensors" || fail "the float32 export's weights differ"
refuses "not an empty directory" "$llama" export --checkpoint "$learned" --out "$exp"
refuses "is the checkpoint" "$llama" export --checkpoint "$learned" --out "$learned"
refuses "inside it" "$llama" export --checkpoint "$learned" --out "$learned/export"
refuses "--dtype" "$llama" export --checkpoint "$learned" --out "$work/x" --dtype int8
"$llama" score --checkpoint "$learned" --prompt "the quick brown" --out "$work/score.safetensors" --device cpu > "$work/score.log" ||
  fail "score: $(cat "$work/score.log")"
grep -q "mean next-token loss" "$work/score.log" || fail "score: $(cat "$work/score.log")"
grep -aq '"input_ids"' "$work/score.safetensors" || fail "score file lacks input_ids"
echo "1, 2, 3 4" > "$work/ids.txt"
"$llama" score --checkpoint "$learned" --tokens-file "$work/ids.txt" --out "$work/score2.safetensors" --device cpu > /dev/null
refuses "exists: refusing to overwrite" "$llama" score --checkpoint "$learned" --prompt "the" --out "$work/score.safetensors" --device cpu
refuses "is the --checkpoint input" "$llama" score --checkpoint "$learned" --prompt "the" --out "$learned/model.safetensors" --overwrite
refuses "is the --tokens-file input" "$llama" score --checkpoint "$learned" --tokens-file "$work/ids.txt" --out "$work/ids.txt" --overwrite
refuses "needs --prompt TEXT or --tokens-file" "$llama" score --checkpoint "$learned" --out "$work/x.safetensors"
echo "x 2" > "$work/bad-ids.txt"
refuses "is not a token id" "$llama" score --checkpoint "$learned" --tokens-file "$work/bad-ids.txt" --out "$work/x.safetensors"
# ---- issue 16: LoRA (--lora-rank): adapters on a frozen base; resident and streamed give the same losses ----
lora=(--data "$work/data.txt" --init-from "$ckpt" --seq-len 16 --batch 2 --accum 2 --steps 4 --eval-every 2
      --eval-batches 2 --device cpu --lora-rank 4)
"$llama" train "${lora[@]}" --placement resident --out "$work/lora-res" --metrics "$work/lora-res.jsonl" > "$work/lora-res.log"
"$llama" train "${lora[@]}" --placement streamed --out "$work/lora-str" --metrics "$work/lora-str.jsonl" > "$work/lora-str.log"
grep -q "LoRA: rank 4, alpha 8.0000 on self_attn.qkv_proj,self_attn.o_proj,mlp.gate_proj,mlp.up_proj,mlp.down_proj: .* trainable parameters; base $ckpt, frozen" \
  "$work/lora-res.log" || fail "no LoRA line: $(grep -i lora "$work/lora-res.log")"
[[ "$(losses "$work/lora-res.jsonl")" == "$(losses "$work/lora-str.jsonl")" ]] ||
  fail "streamed LoRA losses differ from resident:\n$(losses "$work/lora-res.jsonl")\n---\n$(losses "$work/lora-str.jsonl")"
# the base is read group by group into the LoRA model: with fresh adapters (B = 0) step 1's loss is
# the full model's from the same --init-from, bit for bit
"$llama" train "${lora[@]:0:${#lora[@]}-2}" --out "$work/lora-base" --metrics "$work/lora-base.jsonl" > /dev/null
first_loss() { grep -o '"loss":[^,}]*' "$1" | head -n 1; }
[[ "$(first_loss "$work/lora-base.jsonl")" == "$(first_loss "$work/lora-res.jsonl")" ]] ||
  fail "the LoRA run's first loss is not its base's: $(first_loss "$work/lora-res.jsonl") vs $(first_loss "$work/lora-base.jsonl")"
lc="$work/lora-res/step-000004"
[[ -f "$lc/adapters.safetensors" && -f "$lc/adapter_config.json" && ! -e "$lc/model.safetensors" ]] ||
  fail "a LoRA checkpoint holds the adapters, not the base: $(ls "$lc")"
grep -q "\"base\": \"$(cd "$ckpt" && pwd)\"" "$lc/adapter_config.json" || fail "adapter_config.json does not name the base: $(cat "$lc/adapter_config.json")"
cmp -s "$lc/adapters.safetensors" "$work/lora-str/step-000004/adapters.safetensors" || fail "streamed adapters differ from resident"
# the plan: gradients only for the adapters (the full run's grads row is larger)
grads() { grep -E '^ *grads' "$1" | head -n 1; }
"$llama" train "${tiny[@]}" --steps 1 --plan --out "$work/plan-full" > "$work/plan-full.log"
"$llama" train "${tiny[@]}" --steps 1 --plan --lora-rank 2 --out "$work/plan-lora" > "$work/plan-lora.log"
[[ -n "$(grads "$work/plan-lora.log")" && "$(grads "$work/plan-lora.log")" != "$(grads "$work/plan-full.log")" ]] ||
  fail "the LoRA plan's grads row: '$(grads "$work/plan-lora.log")' (full: '$(grads "$work/plan-full.log")')"
# without --init-from: a random base in the shape of the flags, announced
"$llama" train "${tiny[@]}" --steps 2 --lora-rank 2 --lora-targets o_proj,mlp.down_proj --qkv-bias --out "$work/lora-rand" > "$work/lora-rand.log"
grep -q "LoRA: rank 2, alpha 4.0000 on self_attn.o_proj,mlp.down_proj: .* base randomly initialized (seed 1337; no --init-from)" \
  "$work/lora-rand.log" || fail "random base not announced: $(grep -i lora "$work/lora-rand.log")"
grep -q '"base_seed": 1337' "$work/lora-rand/step-000002/adapter_config.json" || fail "adapter_config.json lacks the base's seed"
"$llama" train "${tiny[@]}" --steps 1 --qkv-bias --out "$work/qwen2" > /dev/null  # --qkv-bias: a Qwen2 shape
grep -q '"Qwen2ForCausalLM"' "$work/qwen2/step-000001/config.json" || fail "--qkv-bias did not write a Qwen2 config"
refuses "target qkv_proj" "$llama" train "${tiny[@]}" --steps 1 --lora-rank 2 --lora-targets o_proj,q_proj --out "$work/x"
refuses "'c_attn' is not a projection" "$llama" train "${tiny[@]}" --steps 1 --lora-rank 2 --lora-targets c_attn --out "$work/x"
refuses "targeted twice" "$llama" train "${tiny[@]}" --steps 1 --lora-rank 2 --lora-targets o_proj,self_attn.o_proj --out "$work/x"
refuses "--lora-alpha without --lora-rank" "$llama" train "${tiny[@]}" --steps 1 --lora-alpha 4 --out "$work/x"
refuses "--lora-rank" timeout 20 "$llama" train "${tiny[@]}" --steps 1 --lora-rank -1 --out "$work/x"
# ---- issue 26: the user's files; one spelling per idea ----
# without --data the licence corpus goes to OUT/corpus.txt, never over a file of the user's there
mkdir -p "$work/own-corpus" && echo "my corpus" > "$work/own-corpus/corpus.txt"
refuses "is not the licence corpus" "$llama" train --n-layer 1 --n-head 2 --n-embd 16 --hidden 24 --seq-len 16 --batch 2 \
  --eval-every 0 --device cpu --steps 1 --out "$work/own-corpus"
[[ "$(cat "$work/own-corpus/corpus.txt")" == "my corpus" ]] || fail "strata-llama overwrote the user's OUT/corpus.txt"
# sample: --max-new-tokens (strata-gpt's spelling; --tokens too) and --threads
"$llama" sample --checkpoint "$ckpt" --prompt "the" --max-new-tokens 3 --threads 1 --device cpu > /dev/null ||
  fail "sample --max-new-tokens --threads"
# the machine a plan is for: this one, calibrated (the cache written); --state-on-storage puts every
# host group's state on storage; --machine plans the Qwen2.5-14B shape on the 1.5 TB host without
# allocating, and refuses to train
grep -q "^machine: this one, calibrated" "$work/resident.log" || fail "no machine line: $(head -8 "$work/resident.log")"
ls "$XDG_CACHE_HOME"/strata/calibration-*.json > /dev/null 2>&1 || fail "no calibration cache in $XDG_CACHE_HOME/strata"
"$llama" train "${common[@]}" --placement streamed --state-on-storage --storage-dir "$work/state-storage" --plan \
  --out "$work/state-plan" > "$work/state-plan.log"
grep -q "AdamW m, v on storage" "$work/state-plan.log" || fail "--state-on-storage: $(cat "$work/state-plan.log")"
qwen14=(--data "$work/data.txt" --n-layer 48 --n-head 40 --n-kv-head 8 --n-embd 5120 --hidden 13824 --vocab 152064
        --qkv-bias --untied-head --seq-len 2048 --batch 1 --device cpu)
"$llama" train "${qwen14[@]}" --machine "$machines/h200-1.5tb-4nvme.json" --plan --out "$work/qwen14" > "$work/qwen14.log"
grep -q "^machine: h200-1.5tb-4nvme (--machine" "$work/qwen14.log" || fail "--machine: $(head -8 "$work/qwen14.log")"
grep -q "memory plan: streamed placement" "$work/qwen14.log" || fail "--machine 14B: $(cat "$work/qwen14.log")"
refuses "so --machine only plans" "$llama" train "${common[@]}" --machine "$machines/h200.json" --out "$work/x"
# --gpus 2 (the shared train flags: strata-gpt's data parallelism; on the CPU backend two ranks as
# threads): the step's global batch is --accum 2's on one rank, so the losses agree to FP32
# reduction-order rounding (1e-6 relative); the run resumes bitwise from its checkpoint
one_micro=(--data "$work/data.txt" --n-layer 2 --n-head 2 --n-embd 16 --hidden 24 --seq-len 16 --batch 2 --steps 4
           --eval-every 2 --eval-batches 2 --device cpu)  # common's, one micro-batch per rank
"$llama" train "${one_micro[@]}" --placement resident --gpus 2 --out "$work/dp" --metrics "$work/dp.jsonl" > "$work/dp.log"
grep -q "data parallel: 2 ranks" "$work/dp.log" || fail "--gpus 2: no ranks in the plan: $(head -12 "$work/dp.log")"
paste <(grep -o '"loss":[^,}]*' "$work/resident.jsonl" | cut -d: -f2) <(grep -o '"loss":[^,}]*' "$work/dp.jsonl" | cut -d: -f2) |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad = 1; n++ } END { exit !(n == 4 && !bad) }' ||
  fail "--gpus 2 losses differ from --accum 2's beyond 1e-6:\n$(losses "$work/resident.jsonl")\n---\n$(losses "$work/dp.jsonl")"
"$llama" train "${one_micro[@]}" --placement resident --gpus 2 --stop-at 2 --out "$work/dp-half" \
  --metrics "$work/dp-half.jsonl" > /dev/null
"$llama" train --resume "$work/dp-half/step-000002" --device cpu > /dev/null
cmp -s "$work/dp/step-000004/model.safetensors" "$work/dp-half/step-000004/model.safetensors" ||
  fail "--gpus 2, stopped and resumed, differs from the run in one go"
refuses "--tf32 applies to the CUDA backend" "$llama" train "${common[@]}" --tf32 --out "$work/x"
echo "strata-llama CLI: all checks passed"
