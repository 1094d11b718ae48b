"""tfcomp.callbacks: the Timeline."""
