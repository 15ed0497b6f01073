#!/usr/bin/env bash
# The build-time measurement of issue 28 (item 6): a fresh CUDA build of strata-gpt and strata-llama
# with the cuda-release preset, on every core of the GPU machine (target: <= 150 s on 16 cores).
#
#   OUT=/some/dir bash scripts/gpu-build-time.sh        # JOBS=16 by default; TARGETS to change the set
#   BUILD_DIR=build/timed bash scripts/gpu-build-time.sh  # keep the build there (must not exist yet)
#
# Configures into a fresh temporary directory (removed at the end; BUILD_DIR: a new one, kept),
# times the configure and the build, and logs every translation unit's CPU and wall time
# (scripts/compile-timer.sh as the compiler launcher), so that the report names the longest units:
# with -jN the build cannot be shorter than its longest unit plus the link. Writes
# $OUT/build-time.txt (the summary) and $OUT/build-units.txt (every unit, longest first); the
# build's own output is $OUT/build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
JOBS=${JOBS:-16}
TARGETS=${TARGETS:-strata-gpt strata-llama}
mkdir -p "$OUT"
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
if [[ -n ${BUILD_DIR:-} ]]; then
  [[ ! -e $BUILD_DIR ]] || { echo "BUILD_DIR $BUILD_DIR exists: a fresh build needs a new directory" >&2; exit 1; }
  mkdir -p "$BUILD_DIR"
  build=$(cd "$BUILD_DIR" && pwd)
else
  build=$(mktemp -d "${TMPDIR:-/tmp}/strata-build-time.XXXXXX")
  trap 'rm -rf "$build"' EXIT
fi
units=$build/compile-times.log
summary=$OUT/build-time.txt

{
  echo "strata fresh CUDA build: targets $TARGETS, -j$JOBS, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "nvcc: $(nvcc --version | tail -1)"
  echo "c++: $(c++ --version | head -1)"
  echo "date: $(date -u '+%F %T UTC')"
} > "$summary"

launcher=$PWD/scripts/compile-timer.sh
start=$(date +%s.%N)
cmake --preset cuda-release -B "$build" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
      -DCMAKE_CUDA_COMPILER_LAUNCHER="$launcher" > "$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; echo "configure failed (see $OUT/configure.log)" | tee -a "$summary"; exit 1; }
configured=$(date +%s.%N)
echo "generator: $(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")" >> "$summary"
export STRATA_COMPILE_LOG=$units
TIMEFORMAT='%R s wall, %U s user, %S s system'
# shellcheck disable=SC2086  # TARGETS is a list of names
if ! { time cmake --build "$build" -j"$JOBS" --target $TARGETS > "$OUT/build.log" 2>&1; } 2> "$build/time.txt"; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  echo "build failed (see $OUT/build.log)" | tee -a "$summary"
  exit 1
fi

{
  awk -v a="$start" -v b="$configured" 'BEGIN { printf "configure: %.1f s\n", b - a }'
  echo "build (cmake --build -j$JOBS --target $TARGETS): $(cat "$build/time.txt")"
  echo
  echo "longest units (CPU s = user + system, wall s, output file):"
  sort -rn "$units" | head -12 | awk '{ printf "  %7.1f %7.1f  %s\n", $1, $4, $5 }'
  awk '{ cpu += $1 } END { printf "all %d units compiled (links not counted): %.0f s of CPU\n", NR, cpu }' "$units"
} >> "$summary"
sort -rn "$units" > "$OUT/build-units.txt"
cat "$summary"
