#!/usr/bin/env bash
# Formatting check: every tracked C++/CUDA file must be as .clang-format formats it (clang-format 14, Debian 12).
# Fix with: git ls-files '*.cpp' '*.hpp' '*.cu' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang-format >/dev/null; then
  echo "tools/ci/format.sh: clang-format not found (tools/setup.sh installs it)" >&2
  exit 1
fi
git ls-files '*.cpp' '*.hpp' '*.cu' | xargs clang-format --dry-run -Werror
echo "format: $(git ls-files '*.cpp' '*.hpp' '*.cu' | wc -l) files formatted as .clang-format says"
