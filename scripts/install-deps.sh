#!/usr/bin/env bash
# Installs the Debian packages strata builds with, if any are missing (needs root or sudo).
set -euo pipefail
packages=(cmake make ninja-build g++ pkg-config libeigen3-dev libfmt-dev doctest-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev liburing-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "strata: installing missing packages: ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends "${missing[@]}"; }
fi
# nvcc is optional: the CUDA backend is built when it is found.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "strata: nvcc found at /usr/local/cuda/bin (add it to PATH to build the CUDA backend)"
fi
