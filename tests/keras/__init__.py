"""tfcomp.keras: FrozenVarianceAdam and the Keras versions tfcomp runs under."""
