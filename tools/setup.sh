#!/usr/bin/env bash
# Installs everything shardplan needs on Debian 12 (idempotent, non-interactive). Run as root (or with sudo).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libboost-graph-dev nlohmann-json3-dev libfmt-dev catch2 libcli11-dev
      python3 python3-venv python3-dev clang llvm clang-format ccache zlib1g-dev)
if [[ "${SHARDPLAN_WITH_BROWSER:-1}" == 1 ]]; then pkgs+=(chromium); fi
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
