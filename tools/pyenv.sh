#!/usr/bin/env bash
# Creates (or reuses) the project's one Python environment -- pinned torch (PyPI's Linux wheel, used on the CPU),
# torchao, torchtitan, deepspeed -- under ~/.cache/shardplan/, keyed by a hash of tools/pyenv-requirements.txt,
# and prints the path of its python on stdout (everything else goes to stderr). Idempotent, non-interactive.
# Usage: python=$(bash tools/pyenv.sh)     SHARDPLAN_PYENV_DIR overrides the cache folder.
set -euo pipefail
exec 3>&1 1>&2
cd "$(dirname "$0")/.."
req=tools/pyenv-requirements.txt
cache=${SHARDPLAN_PYENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shardplan}
mkdir -p "$cache"

# Debian 12 ships python3 without venv/ensurepip: install python3-venv the way tools/setup.sh installs packages.
py=$(command -v python3 || true)
if [[ -z "$py" ]] || ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3 python3-venv
  py=$(command -v python3)
fi
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# The key: the pinned set, the interpreter's version and this script (how it installs).
key=$(cat "$req" tools/pyenv.sh <(echo "$pyver") | sha256sum | cut -c1-16)
venv="$cache/pyenv-$key"

# One creator at a time (CI jobs or agents sharing a cache); the others wait, then reuse.
exec 9>"$cache/pyenv.lock"
flock 9
if [[ ! -f "$venv/.complete" ]]; then
  rm -rf "$venv"
  echo "pyenv: creating $venv (python $pyver, $(grep -c '==' "$req") pinned packages)"
  start=$(date +%s)
  "$py" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input -q)
  # Everything but deepspeed from wheels, exactly the pinned closure (--no-deps: no resolver, and the CUDA
  # wheels the CPU never loads stay out; see the header of $req). torch's PyPI wheel for Linux is built with
  # CUDA: the nvidia-* wheels it links are loaded by `import torch` but never used on the CPU.
  "${pip[@]}" install --no-deps --only-binary=:all: -r <(grep -v '^deepspeed==' "$req")
  # deepspeed is an sdist whose setup.py imports torch: build it against the installed torch, no CUDA ops
  # (DS_BUILD_OPS=0: ops are JIT-built on first use, never here).
  DS_BUILD_OPS=0 DS_SKIP_CUDA_CHECK=1 "${pip[@]}" install --no-build-isolation --no-deps \
    "$(grep '^deepspeed==' "$req")"
  # Smoke test: what the project's tools use must import and work without a GPU.
  "$venv/bin/python" - <<'PY'
import torch, torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore
import torchao, torchtitan, jsonschema
from deepspeed.runtime.config import DeepSpeedConfig
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
mesh = init_device_mesh("cpu", (8,))
with FakeTensorMode():  # FSDP2 on fake tensors, rank 0 of 8: what tools/reference/run.py does
    m = fully_shard(torch.nn.Linear(16, 16), mesh=mesh)
    m(torch.empty(2, 16)).sum().backward()
    assert m.weight.to_local().shape == (2, 16) and m.weight.grad is not None
dist.destroy_process_group()
DeepSpeedConfig({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})
print("pyenv: torch", torch.__version__, "torchao", torchao.__version__, "deepspeed ok, FSDP2 on fake tensors ok")
PY
  touch "$venv/.complete"
  echo "pyenv: created in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
fi
echo "$venv/bin/python" >&3
