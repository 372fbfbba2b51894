"""What the reference-lane tests share: the checkout's root, the shardplan binary they compare with, and the guard on
the pinned environment's packages (tools/pyenv.sh): outside CI a missing package skips the tests that need it; in CI
(CI=true) it is a failure, so a test whose tool is missing cannot pass there."""
import importlib
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARDPLAN = os.environ.get("SHARDPLAN_BIN", os.path.join(ROOT, "build", "planner", "shardplan"))


def have(*modules):
    """True when every module imports; False outside CI when one does not; in CI the ImportError propagates."""
    try:
        for name in modules:
            importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI"):
            raise
        return False
    return True
