"""The reference lane's batch mode (run.py --batch): every configuration line in a forked child of one process."""
import importlib
import os
import sys
from pathlib import Path

from lane.args import parse_args
from lane.spec import PlanError
from lane.step import run


def config_name(line: str) -> str:
    """Record name of a configuration line "MODEL GPUS FLAGS...": the model's file stem, g<GPUS> and the flags
    without dashes, e.g. llama3-8b-g8-layers-4-ac-none-mbs-1-seq-2048."""
    words = line.split()
    model = Path(words[0]).name.removesuffix(".json")
    return f"{model}-g{words[1]}" + "".join(
        ("-" + w[2:]) if w.startswith("--") else ("-" + w) for w in words[2:])


def run_batch(path: str, out_dir: str) -> int:
    """Runs every configuration line of `path` in this process (one torch import for all), writing
    OUT/records/NAME.json and OUT/traces/NAME.json; a record already there is kept. Returns 2 if any failed."""
    out = Path(out_dir)
    (out / "records").mkdir(parents=True, exist_ok=True)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    # Imported once, before the children fork.
    for module in ("torch", "torch.distributed", "torch.distributed.fsdp",
                   "torch.distributed._tools.fsdp2_mem_tracker"):
        importlib.import_module(module)

    status = 0
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = config_name(line)
        rec = out / "records" / f"{name}.json"
        if rec.is_file() and rec.stat().st_size > 0:
            continue
        words = line.split()
        argv = ["--model", words[0], "--gpus", words[1], *words[2:], "--id", f"ref-{name}", "-o", str(rec),
                "--trace", str(out / "traces" / f"{name}.json")]
        # One forked child per configuration: torch is imported once (here), and no state of one run (fused
        # optimizer kernels, the process group, the patched sharding propagator) leaks into the next.
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                rc = run(parse_args(argv))
            except PlanError as e:
                print(f"run.py: {name}: {e}", file=sys.stderr)
                rc = 2
            except Exception as e:  # noqa: BLE001 - report and go on with the next configuration
                print(f"run.py: {name}: {type(e).__name__}: {e}", file=sys.stderr)
                rc = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
        _, wstatus = os.waitpid(pid, 0)
        status = max(status, os.waitstatus_to_exitcode(wstatus))
    return status
