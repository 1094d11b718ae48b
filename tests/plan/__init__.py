"""tfcomp.plan: a compressor per tensor."""
