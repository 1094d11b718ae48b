"""tfcomp.auto: compression=tfcomp.Auto()."""
