"""Training loops, one per model family, each with checkpoints, ``resume`` and a run directory."""
