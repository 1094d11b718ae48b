"""tfcomp.testing: the in-process K-worker emulator."""
