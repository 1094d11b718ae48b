"""tfcomp: gradient compression for TensorFlow/Keras data-parallel training."""

__version__ = "0.1.0"
