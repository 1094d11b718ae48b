"""tfcomp's Horovod engine: drop-in replacements for Horovod's Keras optimizer
wrapper and gradient tape whose compression= takes tfcomp's compressors.

    import horovod.tensorflow.keras as hvd
    import tfcomp.horovod
    hvd.init()
    opt = tfcomp.horovod.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), compression=tfcomp.DRAGONN)

Run with `horovodrun -np N python train.py`.
"""
from tfcomp.horovod.engine import HorovodEngine
from tfcomp.horovod.optimizer import DistributedOptimizer
from tfcomp.horovod.tape import DistributedGradientTape

__all__ = ["DistributedOptimizer", "DistributedGradientTape", "HorovodEngine"]
