"""The reference lane (tools/reference/run.py) as modules: spec, args, models, sac, tracker, wrap, step, pp,
record, batch (issue 29: no file over about 500 lines)."""
import sys
from pathlib import Path

# tools/common/ (shared with tools/realrun/ and tools/published/): tools/ on the import path.
_TOOLS = str(Path(__file__).resolve().parents[2])
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)
