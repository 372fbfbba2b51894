"""What the reference lane (tools/reference/lane/), the real-run harness (tools/realrun/realrun.py) and the converter
(tools/published/) share: the closed-form parameter count (params.py) and torchtitan's op-level selective
activation-checkpoint policy (sac.py). Standard library only (sac.py is handed torch's CheckpointPolicy). The emitted
training scripts (planner/emit_*.cpp) are standalone files users run, so they keep their own copies."""
