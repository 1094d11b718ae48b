"""tfcomp: gradient compression for TensorFlow/Keras data-parallel training."""
from tfcomp import callbacks, distribute
from tfcomp.compressors import (ACPSGD, DGC, DRAGONN, EFSignSGD, FP16, NoCompression, PowerSGD, RandomK,
                                SignSGD, TopK)

__version__ = "0.1.0"

__all__ = ["callbacks", "distribute", "NoCompression", "FP16", "SignSGD", "EFSignSGD", "TopK", "RandomK", "DGC",
           "DRAGONN", "PowerSGD", "ACPSGD"]
