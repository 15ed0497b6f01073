#!/usr/bin/env bash
# The main job: on a fresh Debian machine, install what is missing, build strata-gpt (Release),
# train a small GPT for a few minutes on a corpus every Debian system has (the licence texts in
# /usr/share/common-licenses), show the loss falling, and sample from the result.
#
#   bash scripts/train-demo.sh [extra strata-gpt train flags, e.g. --steps 600]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

cmake --preset cpu-release -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF > /dev/null
cmake --build build/cpu-release --target strata-gpt

mkdir -p runs/demo
corpus=runs/demo/corpus.txt
# Every regular file (not the symlinks), in a fixed order, so the corpus is the same everywhere.
find /usr/share/common-licenses -maxdepth 1 -type f | LC_ALL=C sort | xargs cat > "$corpus"
echo "corpus: $corpus ($(wc -c < "$corpus") bytes from /usr/share/common-licenses)"

./build/cpu-release/examples/strata-gpt train --data "$corpus" --out runs/demo \
  --metrics runs/demo/metrics.jsonl --steps 300 --eval-every 50 "$@"

latest=$(ls -d runs/demo/step-* | LC_ALL=C sort | tail -n 1)
echo
echo "sample from $latest:"
./build/cpu-release/examples/strata-gpt sample --checkpoint "$latest" \
  --prompt "This License" --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 7
