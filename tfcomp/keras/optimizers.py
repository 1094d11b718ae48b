"""How a compressor fits the Keras optimizer that applies the exchanged gradients:
momentum="auto" resolved against it (tfcomp.compressors.base.WorkerMomentum),
a FrozenVarianceAdam's variance frozen where compression starts, and a warning,
once, for combinations that tfcomp's convergence benchmark
(benchmarks/results/convergence.md) found to train worse than dense, with what
to change."""

import tensorflow as tf
from absl import logging

from tfcomp.keras import version as keras_in_use
from tfcomp.compressors.momentum import AUTO, WorkerMomentum
from tfcomp.compressors.cast import FP16, NoCompression
from tfcomp.compressors.sign import EFSignSGD, SignSGD
from tfcomp.compressors.lowrank import ACPSGD, PowerSGD
from tfcomp.compressors.sparse import RandomK, Sparsifier
from tfcomp.keras.frozen_adam import FrozenVarianceAdam

#: Below this ratio the sparsifiers trained measurably slower or worse than dense (SGD and Adam).
MIN_RATIO = 0.1
# What benchmarks/results/convergence.md measured under SGD with momentum, quoted by advice().
SGD_LOW_RATIO_STEPS = "1.65-2.7x"
SGD_NO_WARMUP = ("the sparsifiers and PowerSGD ended 0.5-3.2 points lower on the LSTM language model, "
                 "DRAGONN at 1.9x dense's steps to the target accuracy")
SGD_RANDOMK = "3.1 and 1.0 points"
ADAM_RANDOMK = "1.5 and 0.7 points"  # after a dense epoch, at 2.9x dense's steps on both
#: The lowest ranks that trained like dense after a dense epoch (convergence.md).
MIN_RANK = {PowerSGD: 4, ACPSGD: 8}
LOW_RANK_MEASURED = {
    PowerSGD: "PowerSGD(1) took 1.8-2.5x dense's steps to the target accuracy on the digits MLP and CNN and "
              "ended 25 points below on the LSTM language model",
    ACPSGD: "ACPSGD(4) took 1.4-2.4x dense's steps on the digits MLP and CNN and ended 6 points below on the "
            "LSTM language model; ACPSGD(1) ended 2-48 points below",
}
#: SignSGD's aggregate is +-1 per element, so the learning rate is every weight's step.
SIGN_SGD_MAX_LEARNING_RATE = 1e-2
_advised = set()


def _innermost(optimizer):
    """The optimizer a LossScaleOptimizer (or several) wraps; optimizer itself otherwise."""
    while getattr(optimizer, "inner_optimizer", None) is not None:
        optimizer = optimizer.inner_optimizer
    return optimizer


def sgd_momentum(optimizer):
    """The momentum of a Keras SGD optimizer (current or legacy, under a
    LossScaleOptimizer or not), 0.0 for SGD without it, None for anything else."""
    optimizer = _innermost(optimizer)
    if not isinstance(optimizer, _sgd_classes()):
        return None
    momentum = getattr(optimizer, "momentum", None)  # Keras' current SGD (and Keras 3's): a Python float
    if isinstance(momentum, (int, float)):
        return float(momentum)
    with tf.init_scope():  # the legacy SGD's hyperparameter may be a (distributed) variable
        return _read(optimizer._get_hyper("momentum"))  # pylint: disable=protected-access


def _sgd_classes():
    keras = keras_in_use.in_use()
    if keras.major >= 3:
        return (keras.internal("optimizers.sgd").SGD,)
    return (keras.internal("optimizers.sgd").SGD, keras.internal("optimizers.legacy.gradient_descent").SGD)


def _read(value):
    """A float from a Python number, a tensor or a (Keras or distributed) variable."""
    return float(tf.convert_to_tensor(value).numpy())


def frozen_variance_adam(optimizer):
    """The FrozenVarianceAdam inside optimizer (under a LossScaleOptimizer or not), or None."""
    optimizer = _innermost(optimizer)
    return optimizer if isinstance(optimizer, FrozenVarianceAdam) else None


def bind_variance(optimizer, exchange):
    """A FrozenVarianceAdam left to freeze its variance where compression starts
    learns the exchange's dense warm-up (tfcomp.Auto's switch step is not known
    in advance: it needs variance_steps)."""
    adam = frozen_variance_adam(optimizer)
    if adam is None or adam.variance_steps is not None:
        return
    if exchange.controller is not None:
        raise ValueError("FrozenVarianceAdam under tfcomp.Auto: Auto decides when compression starts while "
                         "training, so give the optimizer variance_steps= (dense steps before its variance "
                         "freezes) yourself")
    adam.freeze_at_warmup_end(exchange.warmup_steps)


def bind_exchange(exchange, optimizer):
    """Binds exchange to the optimizer that applies its gradients: momentum="auto"
    resolved against it, any advice given, a FrozenVarianceAdam told where compression
    starts, and a controller's (tfcomp.Auto's) record hung on it. Engines call it
    before the exchange's state_specs."""
    if exchange.controller is not None:
        exchange.controller.attach(optimizer)
    bind_variance(optimizer, exchange)
    exchange.bind(lambda compressor: resolve(compressor, optimizer, exchange.warmup_steps), optimizer)


def learning_rate(optimizer):
    """The optimizer's current learning rate, or None if it cannot be read."""
    optimizer = _innermost(optimizer)
    try:
        with tf.init_scope():
            return _read(optimizer.learning_rate)
    except (TypeError, ValueError, AttributeError):
        return None


def advice(compressor, optimizer, warmup_steps=None):
    """What to change for a combination known to train worse than dense, or None.
    warmup_steps: the exchange's dense warm-up (None: not known)."""
    name = type(compressor).__name__
    beta = sgd_momentum(optimizer)
    clipping = [k for k in ("clipnorm", "clipvalue", "global_clipnorm") if getattr(_innermost(optimizer), k, None)]
    if beta and clipping and isinstance(compressor, WorkerMomentum) and compressor.momentum == AUTO:
        return (f"{name} takes over the optimizer's momentum, and the optimizer's {clipping[0]} then clips "
                f"what it is handed (the change of the averaged velocity), not the gradient. Clip the "
                f"gradients before the optimizer, or pass momentum=None to {name}.")
    lossless = isinstance(compressor, (NoCompression, FP16))
    adaptive = type(_innermost(optimizer)).__name__
    if beta is None and isinstance(compressor, SignSGD):
        return (f"SignSGD under {adaptive}: majority-vote signs carry no magnitude for an adaptive optimizer's "
                f"moments; in tfcomp's convergence benchmark it took 1.37x and 1.39x dense Adam's steps to the "
                f"target accuracy on the digits MLP and CNN, and ended 1.3 points below on the MLP. Use EFSignSGD "
                f"with tfcomp.FrozenVarianceAdam (like dense there), or SGD with momentum.")
    if beta is None and not lossless and frozen_variance_adam(optimizer) is None:
        replaces = "" if "adam" in adaptive.lower() else (
            f" (in place of {adaptive}: tfcomp has no frozen-variance {adaptive})")
        return (f"{name} under {adaptive}: an adaptive optimizer's second moment measures the compressor's "
                f"output, not the gradient; in tfcomp's convergence benchmark every compressor but FP16 and PowerSGD "
                f"took 1.4-1.9x dense's steps to the target accuracy under Adam on the digits CNN (RandomK 2.9x, "
                f"2.3 points below). Use tfcomp.FrozenVarianceAdam{replaces} "
                f"(Adam's arguments; weight_decay= for AdamW) with a dense warm-up of about an epoch "
                f"(warmup_steps= on the strategy or DistributedOptimizer): it freezes the variance when "
                f"compression starts, and every error-feedback compressor but RandomK trained like dense Adam "
                f"there. Or use SGD with momentum, or FP16.")
    if isinstance(compressor, Sparsifier) and beta is None and compressor.ratio < MIN_RATIO:
        return (f"{name}(ratio={compressor.ratio:g}) under {adaptive}: in tfcomp's "
                f"convergence benchmark the sparsifiers at ratio 0.001 took 2.1-2.4x dense Adam's steps to the "
                f"target accuracy and ended 0.5 to 2.5 points below, even under tfcomp.FrozenVarianceAdam (at 0.1 "
                f"like dense). Use "
                f"ratio>={MIN_RATIO:g}, or SGD with momentum.")
    if isinstance(compressor, SignSGD) and beta is not None:
        lr = learning_rate(optimizer)
        if lr is None or lr > SIGN_SGD_MAX_LEARNING_RATE:
            return (f"SignSGD under SGD: the aggregate is +-1 per element, so the learning rate is every "
                    f"weight's step (times 1/(1-momentum)); it needs one about 100x smaller than dense SGD "
                    f"(6e-4 on the digits models and 0.01 on an LSTM language model in tfcomp's benchmark, where "
                    f"lr 0.1 diverged). Or use EFSignSGD.")
    return None


def settings_advice(compressor):
    """What to change in a compressor's own settings that tfcomp's convergence benchmark
    found to train worse than dense whatever the optimizer, or None: said when an engine
    is made, before any worker trains."""
    name = type(compressor).__name__
    if isinstance(compressor, RandomK):
        return (f"RandomK: in tfcomp's convergence benchmark it ended {SGD_RANDOMK} below dense under SGD with "
                f"momentum and {ADAM_RANDOMK} below under FrozenVarianceAdam on the digits MLP and CNN. TopK, DGC "
                f"and DRAGONN at the same ratio keep what matters instead of a random subset.")
    changes = []
    if isinstance(compressor, Sparsifier) and compressor.ratio < MIN_RATIO:
        changes.append(f"ratio>={MIN_RATIO:g}, the default (at 0.01 the sparsifiers took {SGD_LOW_RATIO_STEPS} "
                       f"dense's steps to the target accuracy on the digits MLP and CNN)")
    rank = getattr(compressor, "matrix_approximation_rank", None)
    least = MIN_RANK.get(type(compressor))
    if least and rank < least:
        changes.append(f"rank>={least}, the default ({LOW_RANK_MEASURED[type(compressor)]})")
    if isinstance(compressor, (Sparsifier, PowerSGD, ACPSGD)) and compressor.warmup_steps == 0:
        changes.append(f"a dense warm-up of an epoch, the default (warmup_steps='epoch'; without it {SGD_NO_WARMUP})")
    if not changes:
        return None
    return (f"{compressor!r} trains slower or worse than dense in tfcomp's convergence benchmark at these "
            f"settings. For training like dense use " + " and ".join(changes) + ".")


def advise_on_settings(compressors):
    """Warns, once per compressor, about settings_advice."""
    for compressor in compressors:
        said = settings_advice(compressor)
        if said and repr(compressor) not in _advised:
            _advised.add(repr(compressor))
            logging.warning("tfcomp: %s", said)


def resolve(compressor, optimizer, warmup_steps=None, advise=True):
    """The compressor to run under optimizer (None: not known); warns once about
    combinations that train worse than dense (unless advise is False)."""
    if optimizer is None:
        return compressor
    said = advice(compressor, optimizer, warmup_steps) if advise else None
    if said and (repr(compressor), type(optimizer).__name__) not in _advised:
        _advised.add((repr(compressor), type(optimizer).__name__))
        logging.warning("tfcomp: %s", said)
    if not isinstance(compressor, WorkerMomentum):
        return compressor
    beta = sgd_momentum(optimizer)
    if compressor.momentum == AUTO:
        adam = frozen_variance_adam(optimizer)
        if beta is None and adam is not None and isinstance(compressor, EFSignSGD):
            # Compressing the first moment (error feedback on the update) kept EFSignSGD within a point of
            # dense Adam; the sparsifiers trained better on the gradient (benchmarks/results/convergence.md).
            beta = float(adam.beta_1)
        return compressor.with_optimizer_momentum(beta) if beta else compressor
    if compressor.momentum is not None and beta:
        raise ValueError(
            f"{compressor!r} applies momentum {compressor.momentum} on the worker and the optimizer "
            f"applies momentum {beta} again. Leave the compressor's momentum at 'auto' (it takes over "
            f"the optimizer's), or compile the optimizer with momentum=0.")
    return compressor
