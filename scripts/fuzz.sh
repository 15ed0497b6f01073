#!/usr/bin/env bash
# Builds strata's libFuzzer harnesses (fuzz/) with clang, ASan and UBSan in build/fuzz, and runs
# each one from its committed seed corpus (fuzz/corpus/<name>/, which holds the regression-*
# inputs of past findings too). Fails when any harness crashes or violates a property.
#
#   scripts/fuzz.sh                 CI: a bounded number of inputs per harness (seconds each)
#   scripts/fuzz.sh --minutes M     M minutes per harness instead, one after the other
#   scripts/fuzz.sh --runs N        N inputs per harness
#   scripts/fuzz.sh ... NAME...     only these harnesses (tokenizer, records, ...)
#
# New inputs libFuzzer finds go to build/fuzz/corpus/<name>/, crashing ones to
# build/fuzz/artifacts/; the committed corpus is only read. docs/fuzzing.md says more.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=4000
minutes=""
only=()
while (($#)); do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done

# clang and libFuzzer, as scripts/install-deps.sh installs the rest. libclang-rt-14-dev (the
# sanitizer and fuzzer runtimes, FuzzedDataProvider.h) is only recommended by clang, so it is named.
packages=(clang libfuzzer-14-dev libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz.sh: installing missing packages: ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

build=build/fuzz
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE= "${launcher[@]}" \
  -DSTRATA_BUILD_FUZZERS=ON -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_EXAMPLES=OFF -DSTRATA_BUILD_BENCH=OFF \
  -DSTRATA_ENABLE_CUDA=OFF --log-level=WARNING
cmake --build "$build" -j"$(nproc)"

targets=()
if ((${#only[@]})); then
  targets=("${only[@]}")
else
  for dir in fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi

if [[ -n "$minutes" ]]; then
  limit=(-max_total_time=$((minutes * 60)))
else
  limit=(-runs="$runs")
fi
mkdir -p "$build/artifacts"
failed=()
for name in "${targets[@]}"; do
  exe="$build/fuzz/strata_fuzz_$name"
  [[ -x "$exe" ]] || { echo "fuzz.sh: no harness '$name' (fuzz/$name.cpp)" >&2; exit 2; }
  scratch="$build/corpus/$name"
  mkdir -p "$scratch"
  dict=()
  case "$name" in
    records|checkpoint_json|hf_index|hf_tokenizer) dict=(-dict=fuzz/dict/json.dict) ;;
    *) [[ -f "fuzz/dict/$name.dict" ]] && dict=(-dict="fuzz/dict/$name.dict") ;;
  esac
  log="$build/$name.log"
  echo "== $name: ${limit[*]} from fuzz/corpus/$name ($(ls "fuzz/corpus/$name" | wc -l) seeds)"
  start=$SECONDS
  # The scratch corpus comes first: libFuzzer adds what it finds there, not to the committed seeds.
  if "$exe" "${limit[@]}" "${dict[@]}" -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$name-" "$scratch" "fuzz/corpus/$name" >"$log" 2>&1; then
    echo "   ok in $((SECONDS - start)) s: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)"
  else
    echo "   FAILED in $((SECONDS - start)) s; the end of $log:"
    tail -25 "$log" | sed 's/^/   | /'
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: ${#failed[@]} harness(es) failed: ${failed[*]} (crashing inputs: $build/artifacts/)" >&2
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} harnesses passed"
