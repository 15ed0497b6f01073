#!/usr/bin/env bash
# Runs every test: installs missing packages, configures (Release, with the CUDA backend when nvcc
# is found), builds and runs CTest, one CTest test per test case. On a machine without a GPU the
# CUDA cases report "Skipped" (tests/support/skip.hpp), not "Passed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
# A tree configured before the presets used Ninja cannot change generator: configure it afresh
# (CMake's --fresh replaces the tree's cache; the sources and everything else stay).
fresh=()
cache=build/release/CMakeCache.txt
[[ -f $cache ]] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache" && fresh=(--fresh)
cmake --workflow --preset test "${fresh[@]}"
