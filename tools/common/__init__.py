"""What the reference lane (tools/reference/lane/), the real-run harness (tools/realrun/realrun.py) and the converter
(tools/published/) share: the closed-form parameter count (params.py), torchtitan's op-level selective
activation-checkpoint policy (sac.py) and the plan flags from shardplan's knob table (knob_args.py over knobs.json,
the snapshot knobs_snapshot.py writes). Standard library only (sac.py is handed torch's CheckpointPolicy). The emitted
training scripts (planner/emit_*.cpp) are standalone files users run, so they keep their own copies."""
