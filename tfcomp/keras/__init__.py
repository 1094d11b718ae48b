"""Which Keras is in use, and how compressors fit the Keras optimizer that applies
the exchanged gradients (momentum takeover, FrozenVarianceAdam)."""
