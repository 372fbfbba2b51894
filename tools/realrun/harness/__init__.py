"""tools/realrun/realrun.py as modules (issue 29: no file over about 500 lines): spec, model, parallel, record."""
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
