"""tfcomp's Horovod engine: drop-in replacements for Horovod's Keras optimizer
wrapper and gradient tape whose compression= takes tfcomp's compressors.

    import horovod.tensorflow.keras as hvd
    import tfcomp.horovod
    hvd.init()
    opt = tfcomp.horovod.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), compression=tfcomp.DRAGONN)

Run with `horovodrun -np N python train.py`. `import tfcomp` alone also gives
tfcomp.horovod, loaded on first use.
"""
import importlib.util

if importlib.util.find_spec("horovod") is None:
    raise ModuleNotFoundError(
        "tfcomp.horovod needs Horovod, which is not installed here. tfcomp's pinned stack builds "
        "horovod==0.28.1 against tensorflow==2.15.1 (`make build`); on the current-TensorFlow stack "
        "Horovod does not build (README, 'Supported stacks').", name="horovod")

# pylint: disable=wrong-import-position
from tfcomp.horovod.engine import HorovodEngine
from tfcomp.horovod.optimizer import DistributedOptimizer
from tfcomp.horovod.tape import DistributedGradientTape

__all__ = ["DistributedOptimizer", "DistributedGradientTape", "HorovodEngine"]
