#!/usr/bin/env bash
# Makes the Hugging Face parity fixtures from the real models, on the CPU, without network:
#   OUTDIR/hf/        GPT-2 (tools/make_hf_fixtures.py)        -> tests/fixtures/hf/
#   OUTDIR/hf_llama/  Llama (tools/make_llama_fixture.py)      -> tests/fixtures/hf_llama/
#   OUTDIR/hf_llama_family/  Llama 3.1 GQA + untied, Qwen2, Mistral (make_llama_fixture.py --family)
#                                                             -> tests/fixtures/hf_llama_family/
# each with its log.txt, summary.json and provenance.json (versions, machine, command, checks,
# SHA-256 of every file), and OUTDIR/make_fixtures.txt (this run: date, host, git commit, statuses).
# Needs python3 with the pinned torch and transformers (tools/fixture_provenance.py). Exits non-zero
# when either script fails one of its checks (what failed is at the end of its log).
#
#   tools/make_fixtures.sh OUTDIR [--allow-other-versions]
#   then: cp -r OUTDIR/hf OUTDIR/hf_llama OUTDIR/hf_llama_family tests/fixtures/
set -uo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
    echo "usage: $0 OUTDIR [--allow-other-versions]" >&2
    exit 2
fi
out=$1
shift
tools=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/hf" "$out/hf_llama" "$out/hf_llama_family"
# No network, no GPU: the fixtures are CPU float32 and must not depend on a device or a download.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 CUDA_VISIBLE_DEVICES=""

python3 "$tools/make_hf_fixtures.py" --out "$out/hf" "$@" 2>&1 | tee "$out/hf/log.txt"
gpt2=$?
python3 "$tools/make_llama_fixture.py" --out "$out/hf_llama" "$@" 2>&1 | tee "$out/hf_llama/log.txt"
llama=$?
python3 "$tools/make_llama_fixture.py" --family --out "$out/hf_llama_family" "$@" 2>&1 | tee "$out/hf_llama_family/log.txt"
family=$?

{
    echo "tools/make_fixtures.sh $out $*"
    echo "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -srm)"
    echo "python: $(python3 --version 2>&1)"
    echo "git commit: $(git -C "$tools/.." rev-parse HEAD 2>/dev/null || echo "unknown (no git here)")"
    echo "make_hf_fixtures.py exit status: $gpt2"
    echo "make_llama_fixture.py exit status: $llama"
    echo "make_llama_fixture.py --family exit status: $family"
} > "$out/make_fixtures.txt"
cat "$out/make_fixtures.txt"
[[ $gpt2 -eq 0 && $llama -eq 0 && $family -eq 0 ]]
