"""tfcomp.exchange: tensor selection, the compression-profile cache and the non-finite check."""
