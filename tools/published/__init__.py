"""tools/convert_published.py as modules (issue 29: no file over about 500 lines): presets, clusters, models,
plan, measured, rules, record."""
import os

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tools/
