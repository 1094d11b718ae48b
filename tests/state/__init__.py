"""tfcomp.state: the compressors' variables in checkpoints."""
