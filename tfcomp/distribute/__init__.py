"""The tf.distribute engine: MultiWorkerMirroredStrategy with compressed gradients."""
from tfcomp.distribute.strategy import MultiWorkerMirroredStrategy

__all__ = ["MultiWorkerMirroredStrategy"]
