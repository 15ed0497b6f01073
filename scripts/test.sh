#!/usr/bin/env bash
# Runs every test: installs missing packages, configures (Release, with the CUDA backend when nvcc
# is found), builds and runs CTest. CUDA cases skip, visibly, on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
cmake --workflow --preset test
