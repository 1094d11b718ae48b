"""The phases of tfcomp.Auto's decisions, as its history and checkpoints record them."""
PROFILING, PLANNED, DENSE = "profiling", "planned", "dense"
AUDIT = "audit"  # a history entry: the kept configuration timed against every alternative
