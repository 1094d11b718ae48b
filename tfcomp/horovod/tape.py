"""tfcomp.horovod.DistributedGradientTape: Horovod's gradient tape for custom
training loops, with tfcomp's compressors."""
import horovod.tensorflow as hvd
import tensorflow as tf

from tfcomp.horovod.engine import ENGINE_ATTRIBUTE, HorovodEngine, LocalVariables, check_horovod_arguments


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=None,  # pylint: disable=invalid-name
                            sparse_as_dense=False, op=hvd.Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=hvd.global_process_set,
                            scale_local_gradients=True, *, optimizer, **exchange_options):
    """A tape whose gradient() averages the gradients over all Horovod ranks with
    compression; arguments as horovod.tensorflow.DistributedGradientTape's.

    optimizer: the Keras optimizer that applies these gradients. A training
        loop makes a new tape every step, so the exchange and the compressor
        state (error-feedback residuals) live on the optimizer, as
        `tfcomp_state`, and checkpoints of it carry them. The exchange is made
        by the first tape of an optimizer; later tapes must ask for the same
        compression.
    exchange_options: as tfcomp.horovod.DistributedOptimizer's (watch_peers
        and the Exchange's options).
    """
    del sparse_as_dense, device_sparse  # every gradient is exchanged dense
    check_horovod_arguments(op, gradient_predivide_factor, groups or num_groups, process_set)
    engine = getattr(optimizer, ENGINE_ATTRIBUTE, None)
    if engine is None:
        engine = HorovodEngine(compression, op=op, device=device_dense, **exchange_options)
        object.__setattr__(optimizer, ENGINE_ATTRIBUTE, engine)  # not a checkpoint dependency
    else:
        wanted = HorovodEngine.describe(compression, op, device_dense, exchange_options)
        if wanted != engine.description:
            raise ValueError(f"this optimizer's gradients are already exchanged as {engine.description}; "
                             f"a tape asked for {wanted}. Use one compression per optimizer.")

    class _DistributedGradientTape:
        def __init__(self, tape, persistent, watch_accessed_variables):
            super(self.__class__, self).__init__(persistent, watch_accessed_variables)  # pylint: disable=bad-super-call
            self._tape = tape
            self._tfcomp_local = LocalVariables(scale_local_gradients)

        def register_local_source(self, source):
            """Keeps source's gradient on this rank, as Horovod's register_local_source."""
            self._tfcomp_local.add(source)

        def gradient(self, target, sources, output_gradients=None, unconnected_gradients=None):
            kwargs = {} if unconnected_gradients is None else {"unconnected_gradients": unconnected_gradients}
            grads = super(self.__class__, self).gradient(target, sources, output_gradients, **kwargs)  # pylint: disable=bad-super-call
            flat_sources = tf.nest.flatten(sources)
            reduced = self._tfcomp_local.reduce(engine, tf.nest.flatten(grads), flat_sources, optimizer)
            return tf.nest.pack_sequence_as(grads, reduced)

    methods = {k: v for k, v in _DistributedGradientTape.__dict__.items() if k not in ("__dict__", "__weakref__")}
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,), methods)
    return cls(gradtape._tape, gradtape._persistent, gradtape._watch_accessed_variables)  # pylint: disable=protected-access
