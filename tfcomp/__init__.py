"""tfcomp: gradient compression for TensorFlow/Keras data-parallel training."""
from tfcomp.compressors import EFSignSGD, FP16, NoCompression, SignSGD

__version__ = "0.1.0"

__all__ = ["NoCompression", "FP16", "SignSGD", "EFSignSGD"]
