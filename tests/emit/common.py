"""Shared pieces of the emitted-config tests: the project's Python (SHARDPLAN_PYTHON), the shardplan binary
(SHARDPLAN_BIN) and running `shardplan plan --emit` for a pinned plan."""
import os
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDPLAN_BIN", os.path.join(ROOT, "build", "planner", "shardplan"))


def require_framework_python(testcase_module):
    """These tests import torch / deepspeed / torchtitan, so they run under the project's environment
    (tools/pyenv.sh). Outside CI they skip when it is not given; in CI its absence is a failure."""
    if not os.environ.get("SHARDPLAN_PYTHON"):
        if os.environ.get("CI"):
            raise RuntimeError(f"{testcase_module}: SHARDPLAN_PYTHON must be set in CI (bash tools/pyenv.sh)")
        raise unittest.SkipTest("SHARDPLAN_PYTHON unset or not this interpreter: run as "
                                "\"$SHARDPLAN_PYTHON -m unittest discover -s tests/emit\" with "
                                "SHARDPLAN_PYTHON=$(bash tools/pyenv.sh)")
    if not os.path.exists(BIN):
        raise RuntimeError(f"shardplan binary not found at {BIN} (set SHARDPLAN_BIN)")


def python():
    """The project's interpreter (tools/pyenv.sh), for subprocesses such as torchrun."""
    return os.environ["SHARDPLAN_PYTHON"]


def run_plan(kind, fixes, model="llama3-8b", gpus=16, global_batch=32, extra=()):
    """Runs `shardplan plan ... --emit KIND:FILE` with the given --fix pins; returns (completed process, FILE)."""
    d = tempfile.mkdtemp(prefix="shardplan-emit-")
    out = os.path.join(d, {"deepspeed": "ds.json", "fsdp2": "plan.py", "torchtitan": "titan_cfg.py",
                           "torchtitan-toml": "titan.toml"}[kind])
    cmd = [BIN, "plan", "--model", model, "--cluster", "dgx-h100", "--gpus", str(gpus), "--global-batch",
           str(global_batch), "--threads", "2", "--top", "1", "--emit", f"{kind}:{out}", *extra]
    for f in fixes:
        cmd += ["--fix", f]
    return subprocess.run(cmd, capture_output=True, text=True), out


def emit(kind, fixes, **kw):
    """run_plan that must succeed; returns (path of the emitted file, stderr)."""
    r, out = run_plan(kind, fixes, **kw)
    cmd = r.args
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return out, r.stderr
