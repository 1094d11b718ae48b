"""tfcomp's compressors, one module per family."""
from tfcomp.compressors.base import Collective, Compressor, Payload, PayloadSpec, Round, TensorContext
from tfcomp.compressors.cast import FP16, NoCompression
from tfcomp.compressors.lowrank import ACPSGD, PowerSGD
from tfcomp.compressors.sign import EFSignSGD, SignSGD
from tfcomp.compressors.sparse import DGC, DRAGONN, RandomK, TopK
from tfcomp.compressors.registry import parse_compressor, resolve

__all__ = ["Collective", "Compressor", "Payload", "PayloadSpec", "Round", "TensorContext", "resolve",
           "parse_compressor",
           "NoCompression", "FP16", "SignSGD", "EFSignSGD", "TopK", "RandomK", "DGC", "DRAGONN", "PowerSGD",
           "ACPSGD"]
