"""`python -m tfcomp.analysis`: profile, predict, whatif and plan (main dispatches)."""
