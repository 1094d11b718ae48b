"""tfcomp.horovod.DistributedOptimizer: Horovod's Keras optimizer wrapper with
tfcomp's compressors."""
import sys

import horovod.tensorflow as hvd
import tensorflow as tf
from horovod.tensorflow.gradient_aggregation_eager import LocalGradientAggregationHelperEager

from tfcomp.keras import version as keras_in_use
from tfcomp.horovod.engine import ENGINE_ATTRIBUTE, HorovodEngine, LocalVariables, check_horovod_arguments
from tfcomp.keras.optimizers import bind_exchange


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=None,  # pylint: disable=invalid-name
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=hvd.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=hvd.global_process_set, scale_local_gradients=True,
                         **exchange_options):
    """Wraps a Keras optimizer (current or legacy, tensorflow-addons' included)
    so that its gradients are averaged over all Horovod ranks with compression.

    Arguments are horovod.tensorflow.keras.DistributedOptimizer's: compression
    takes a tfcomp compressor class or instance, a tfcomp.Plan, or Horovod's
    Compression.none / Compression.fp16. IndexedSlices gradients are sent
    dense whatever sparse_as_dense says; device_sparse is unused for that
    reason. exchange_options (min_compress_elements, bucket_bytes,
    global_seed, selection, warmup_steps, steps_per_epoch) are tfcomp.exchange.step.Exchange's;
    watch_peers=False turns off the report of a lost rank (tfcomp.engines.peers).
    gradient_predivide_factor, groups and other process sets are refused.

    Call it on every rank after hvd.init(): it checks that all ranks run the
    same compression. The compressor state hangs on the returned optimizer as
    `tfcomp_state`; each rank checkpoints its own (see tfcomp.state.variables). The
    exchange is `optimizer.tfcomp_engine` (payload_bytes(variables), ...).
    """
    # Every gradient is exchanged dense; the exchange's collectives are named by
    # TensorFlow, not after the optimizer.
    del sparse_as_dense, device_sparse, name
    keras_in_use.require_keras2("tfcomp.horovod.DistributedOptimizer", "wraps Keras 2's optimizers", optimizer)
    check_horovod_arguments(op, gradient_predivide_factor, groups or num_groups, process_set)
    engine = HorovodEngine(compression, op=op, device=device_dense, **exchange_options)
    bind_exchange(engine.exchange, optimizer)  # momentum="auto" resolved, and any advice given, here

    class _DistributedOptimizer:
        def __init__(self, *args, **kwargs):
            # LossScaleOptimizer's from_config passes its inner optimizer positionally.
            super(self.__class__, self).__init__(*args, **kwargs)  # pylint: disable=bad-super-call
            object.__setattr__(self, ENGINE_ATTRIBUTE, engine)  # not a checkpoint dependency
            self._tfcomp_local = LocalVariables(scale_local_gradients)
            self._tfcomp_aggregation = None
            if backward_passes_per_step > 1:
                self._tfcomp_aggregation = LocalGradientAggregationHelperEager(
                    backward_passes_per_step=backward_passes_per_step, allreduce_func=self._tfcomp_reduce,
                    sparse_as_dense=True, average_aggregated_gradients=average_aggregated_gradients)

        def register_local_var(self, var):
            """Keeps var's gradient on this rank, as Horovod's register_local_var."""
            self._tfcomp_local.add(var)

        def _tfcomp_reduce(self, grads, variables):
            return self._tfcomp_local.reduce(engine, list(grads), list(variables), self)

        def _tfcomp_distribute(self, grads_and_vars):
            grads, variables = zip(*grads_and_vars)
            scale = loss_scale_around(self)
            if scale is not None:  # exchange (and keep residuals of) unscaled gradients
                grads = [None if g is None else tf.convert_to_tensor(g) / tf.cast(scale, g.dtype) for g in grads]
            if self._tfcomp_aggregation is not None:
                reduced = self._tfcomp_aggregation.compute_gradients(tuple(grads), tuple(variables))
            else:
                reduced = self._tfcomp_reduce(grads, variables)
            if scale is not None:
                reduced = [None if g is None else g * tf.cast(scale, g.dtype) for g in reduced]
            return list(zip(reduced, variables))

        def compute_gradients(self, loss, var_list, tape=None):
            # Keras' current optimizers (minimize -> compute_gradients -> apply_gradients).
            base = super(self.__class__, self)  # pylint: disable=bad-super-call
            return self._tfcomp_distribute(base.compute_gradients(loss, var_list, tape))

        def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
            # Keras' legacy optimizers and tensorflow-addons'.
            base = super(self.__class__, self)  # pylint: disable=bad-super-call
            return self._tfcomp_distribute(base._compute_gradients(loss, var_list, grad_loss, tape=tape))  # pylint: disable=protected-access

        def get_gradients(self, loss, params):
            base = super(self.__class__, self)  # pylint: disable=bad-super-call
            return [g for g, _ in self._tfcomp_distribute(list(zip(base.get_gradients(loss, params), params)))]

        def _aggregate_gradients(self, grads_and_vars):
            # Horovod's accumulation helper calls this on the steps it does not apply.
            base = super(self.__class__, self)  # pylint: disable=bad-super-call
            if hasattr(base, "_aggregate_gradients"):
                return base._aggregate_gradients(grads_and_vars)  # pylint: disable=protected-access
            return base.aggregate_gradients(grads_and_vars)

        def apply_gradients(self, *args, **kwargs):
            base = super(self.__class__, self)  # pylint: disable=bad-super-call
            if self._tfcomp_aggregation is None:
                return base.apply_gradients(*args, **kwargs)
            args = (list(args[0]), *args[1:])  # a zip is read on both branches
            return self._tfcomp_aggregation.apply_gradients(
                lambda: base.apply_gradients(*args, **kwargs), self, *args, **kwargs)

    legacy = hasattr(optimizer.__class__, "_compute_gradients")
    unused = ("compute_gradients",) if legacy else ("_compute_gradients", "get_gradients")
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__", *unused)}
    # The class keeps the wrapped optimizer's name, so that a saved model loads without tfcomp.
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    return cls.from_config(optimizer.get_config())


def loss_scale_around(optimizer):
    """The loss scale of a Keras LossScaleOptimizer that wraps optimizer and is
    computing its gradients (Keras wraps the compiled optimizer under
    mixed_float16), or None. Its gradients arrive scaled: the exchange divides
    the scale out (a power of two, so exactly) and multiplies it back, so that
    error-feedback residuals do not change meaning when the scale changes."""
    base_loss_scale_optimizer = keras_in_use.in_use().internal(
        "mixed_precision.loss_scale_optimizer").BaseLossScaleOptimizer
    frame = sys._getframe(1)  # pylint: disable=protected-access
    for _ in range(6):  # the wrapper's compute_gradients, then its caller
        frame = frame.f_back
        if frame is None:
            return None
        caller = frame.f_locals.get("self")
        if isinstance(caller, base_loss_scale_optimizer) and caller.inner_optimizer is optimizer:
            return caller.loss_scale
    return None
