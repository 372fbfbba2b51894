"""The reference lane (tools/reference/run.py) as modules: spec, args, models, sac, tracker, wrap, step, pp,
record, batch (issue 29: no file over about 500 lines)."""
