#!/usr/bin/env bash
# strata-gpt and strata-llama declare the train flags they share once (examples/common/train_flags.hpp):
# every option both list in `train --help` reads the same in both (its type, range, choices and
# help text), the core ones are there in both, and a value out of range or off the list is refused
# with the same message by both.
# Usage: shared_train_options.sh PATH/TO/strata-gpt PATH/TO/strata-llama WORK_DIR
set -euo pipefail
gpt=$1
llama=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { printf 'FAIL: %b\n' "$*" >&2; exit 1; }

# One line per option of `train --help`: "--flag TYPE=DEFAULT help text" (CLI11 puts a long
# option's help on the next line: joined). --out's default is the program's own (runs/gpt, runs/llama).
options() {
  "$1" train --help |
    awk '/^  -/ { if (rec != "") print rec; rec = $0; next } /^     / { rec = rec " " $0; next } END { if (rec != "") print rec }' |
    sed -E 's/^ +//; s/ +/ /g' | sed -n '/^--/p' | sed -E 's/^(--out TEXT)=[^ ]*/\1=DEFAULT/' | sort
}
options "$gpt" > "$work/gpt.txt"
options "$llama" > "$work/llama.txt"
flag_of() { sed -E 's/^(--[a-z0-9-]+).*/\1/' "$1" | sort -u; }
comm -12 <(flag_of "$work/gpt.txt") <(flag_of "$work/llama.txt") > "$work/shared.txt"

# the train flags both programs have (a flag one program loses is a failure, not a smaller set)
for flag in --config --format --chat-template --tokenizer --n-layer --n-head --n-embd --seq-len --batch --accum \
            --gpus --steps --lr --min-lr --warmup --schedule --optimizer --momentum --weight-decay --clip \
            --val-fraction --eval-every --eval-batches --seed --out --save-every --save --resume \
            --allow-option-changes --overwrite --stop-at --metrics --metrics-append --trace --placement \
            --storage-dir --device-budget --host-budget --storage-budget --io-engine --io-workers --plan \
            --machine --recalibrate --state-on-storage --device --tf32 --threads --activations \
            --no-checkpointing --lora-rank --lora-alpha; do
  grep -qx -- "$flag" "$work/shared.txt" || fail "$flag is not an option of both programs' train"
done
# every shared option but the model's own reads the same
while read -r flag; do
  case $flag in --data|--init-from|--lora-targets|--help) continue ;; esac
  a=$(grep -E -- "^$flag( |$)" "$work/gpt.txt")
  b=$(grep -E -- "^$flag( |$)" "$work/llama.txt")
  [[ "$a" == "$b" ]] || fail "$flag reads differently:\n  strata-gpt:   $a\n  strata-llama: $b"
done < "$work/shared.txt"

# the same refusal, word for word (but the program's name), of a value out of range or off the list
same_refusal() {
  if "$gpt" train "$@" > /dev/null 2> "$work/gpt.err"; then fail "strata-gpt accepted: $*"; fi
  if "$llama" train "$@" > /dev/null 2> "$work/llama.err"; then fail "strata-llama accepted: $*"; fi
  sed -i 's/strata-gpt/PROGRAM/g' "$work/gpt.err"
  sed -i 's/strata-llama/PROGRAM/g' "$work/llama.err"
  cmp -s "$work/gpt.err" "$work/llama.err" ||
    fail "'$*' refused differently:\n  strata-gpt:   $(cat "$work/gpt.err")\n  strata-llama: $(cat "$work/llama.err")"
  [[ -s "$work/gpt.err" ]] || fail "'$*' refused with no message"
}
same_refusal --gpus 0
grep -q -- "--gpus: Value 0 not in range \[1 - 64\]" "$work/gpt.err" || fail "--gpus 0: $(cat "$work/gpt.err")"
same_refusal --gpus 65
same_refusal --lr -1
same_refusal --steps 0
same_refusal --placement sideways
grep -q "auto" "$work/gpt.err" || fail "--placement sideways: the choices are not named: $(cat "$work/gpt.err")"
same_refusal --activations sometimes
same_refusal --optimizer lion
same_refusal --schedule zigzag
same_refusal --format csv
same_refusal --io-engine carrier-pigeon
echo "shared train options: all checks passed ($(wc -l < "$work/shared.txt") options)"
