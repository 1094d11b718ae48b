"""The measured parts of a profile that need TensorFlow: each compressor's encode and
decode time for the model's own gradient shapes and what it sends for each, and the
vector-add cost (Zhang's AddEst) per size. Timed on this worker, one tensor at a
time, as the median of `runs` calls of a compiled function (the first, which traces,
left out).

Encode is compress() up to its first payloads; decode is the rest, from the first
collective's result to the gradient (for PowerSGD, its second round's work between
the two allreduces counts as decode: the simulator places all of a compressor's
remaining work after its last transfer).

Decode runs on what the collectives return among num_workers workers (made here from
this worker's payloads: an allgather returns one copy per worker). An allgathered
payload is decoded once per worker, so for a compressor that allgathers, decode is
timed again at 2 and 4 times the workers, and the least-squares slope through the
three, per further worker, kept (CompressorProfile.decode_per_worker): the model
then prices decode linearly in the worker count it predicts for. One difference of
two timings set the slope before; a single noisy pair could make it 0 or double it
(benchmarks/results/decode_scaling.md).
"""
import contextlib
import statistics

import numpy as np
import tensorflow as tf

from tfcomp.costs.network import ALLGATHER, ALLREDUCE, Transfer
from tfcomp.analysis.model.profile import CompressorProfile, Profile
from tfcomp.costs.tables import SizeTable
from tfcomp.analysis.model.timing import median_s
from tfcomp.compressors.base import Collective, TensorContext
from tfcomp.exchange.step import Exchange
from tfcomp.state.variables import CompressionState


def under_sgd(compressors, momentum):
    """{spec: compressor} as each runs under Keras SGD with this momentum (tfcomp.keras.optimizers.resolve:
    momentum='auto' takes the optimizer's over, and compresses the velocity)."""
    from tfcomp.keras import optimizers  # pylint: disable=import-outside-toplevel
    if not 0 <= momentum < 1:
        raise ValueError(f"a momentum in [0, 1), got {momentum!r}")
    sgd = tf.keras.optimizers.SGD(momentum=momentum)
    return {spec: optimizers.resolve(compressor, sgd, advise=False) for spec, compressor in compressors.items()}




def sent_dense(compressor, shape, dtype):
    """Whether tfcomp's exchange (at its default settings) sends a gradient of this shape
    dense under this compressor: 1-D, small, not floating point, or not taken by it."""
    exchange = Exchange(compressor, selection=False)
    return exchange.eligible(shape, dtype) is exchange.dense


def transfers(compressor, shape, dtype=tf.float32):
    """What one worker sends for a gradient of this shape: a Transfer per round and
    collective kind (float16 allreduce payloads apart: the engine may sum them more
    slowly), scaled to the compressor's per-step payload_bytes (ACP-SGD alternates two
    factors); dense allreduce where the compressor does not take it."""
    dtype = tf.as_dtype(dtype)
    if sent_dense(compressor, shape, dtype):
        return (Transfer("allreduce", float(np.prod(shape, dtype=np.int64)) * dtype.size, half=dtype == tf.float16),)
    out = []
    for specs in compressor.payload_specs(shape, dtype):
        by_kind = {}
        for spec in specs:
            key = (spec.collective.value, spec.collective is Collective.ALLREDUCE and spec.dtype == tf.float16)
            by_kind[key] = by_kind.get(key, 0) + spec.nbytes
        out += [Transfer(kind, nbytes, half) for (kind, half), nbytes in by_kind.items()]
    scale = compressor.payload_bytes(shape, dtype) / sum(t.nbytes for t in out)
    return tuple(Transfer(t.collective, t.nbytes * scale, t.half) for t in out)


def _as_result(payload, num_workers):
    """What a collective among num_workers identical workers returns for this payload."""
    if payload.collective is Collective.ALLGATHER:
        return tf.stack([payload.tensor] * num_workers)
    return payload.tensor * num_workers


def codec_seconds(compressor, shape, dtype=tf.float32, num_workers=2, runs=7):
    """(encode seconds, decode seconds) of one gradient of this shape on this worker:
    medians over runs of timestamps taken inside one compiled call, after the payloads
    and after the result, so the two parts come from the same execution. What stands in
    for each collective's result (the payload stacked or multiplied by num_workers) is
    made between timestamps of its own and left out of decode."""
    dtype = tf.as_dtype(dtype)
    if sent_dense(compressor, shape, dtype):
        return 0.0, 0.0
    grad = tf.constant(np.random.default_rng(0).standard_normal(shape).astype(dtype.as_numpy_dtype))
    state = CompressionState(name="analysis_profile")
    variables = state.tensor_state("g", compressor.state_specs(grad.shape, grad.dtype))
    ctx = TensorContext("g", num_workers, tf.constant(1, tf.int64))

    @tf.function
    def timed(g):
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            rnd = compressor.compress(tf.identity(g), variables, ctx)
        encoded, waited = None, tf.constant(0.0, tf.float64)
        while True:
            # The collectives' stand-ins are not codec work: the time making them is left out.
            with tf.control_dependencies([p.tensor for p in rnd.payloads]):
                sent = tf.timestamp()
            encoded = sent if encoded is None else encoded
            with tf.control_dependencies([sent]):
                results = [tf.identity(_as_result(p, num_workers)) for p in rnd.payloads]
            with tf.control_dependencies(results):
                received = tf.timestamp()
            waited += received - sent
            with tf.control_dependencies([received]):
                out = rnd.finish([tf.identity(r) for r in results])
            if not hasattr(out, "payloads"):
                break
            rnd = out
        with tf.control_dependencies([out]):
            return encoded - start, tf.timestamp() - encoded - waited

    with control_dependencies_kept():
        timed(grad)
        samples = [tuple(float(t) for t in timed(grad)) for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


@contextlib.contextmanager
def control_dependencies_kept():
    """Grappler's dependency optimizer drops the control edges that order the timestamps
    around the work (decode then reads 1 us); it changes no kernel, so the timing holds."""
    before = tf.config.optimizer.get_experimental_options().get("dependency_optimization")
    tf.config.optimizer.set_experimental_options({"dependency_optimization": False})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"dependency_optimization": True if before is None else before})


#: Where decode is timed again for a compressor that allgathers, as multiples of num_workers.
SLOPE_WORKERS = (2, 4)


def per_worker_slope(workers, seconds):
    """Seconds each further worker adds: the least-squares slope of seconds over workers, never below 0."""
    return max(0.0, float(np.polyfit(np.asarray(workers, float), np.asarray(seconds, float), 1)[0]))


def compressor_profile(label, compressor, gradients, num_workers=2, runs=7):
    """CompressorProfile of a compressor on the model's gradients [(name, shape, dtype)]:
    encode and decode per size from each distinct gradient shape (the median over
    shapes of one size), decode as num_workers workers' payloads take it, and where a
    gradient's payload is allgathered, what each further worker's copy adds (decode
    timed at SLOPE_WORKERS times num_workers too, per_worker_slope); payloads per gradient."""
    payloads = {name: transfers(compressor, shape, dtype) for name, shape, dtype in gradients}
    by_size, per_worker = {}, {}
    for name, shape, dtype in gradients:
        nbytes = float(np.prod(shape, dtype=np.int64)) * tf.as_dtype(dtype).size
        if (tuple(shape), dtype) not in {(s, d) for s, d, _ in by_size.get(nbytes, [])}:
            seconds = codec_seconds(compressor, shape, dtype, num_workers, runs)
            by_size.setdefault(nbytes, []).append((tuple(shape), dtype, seconds))
            if any(t.collective == ALLGATHER for t in payloads[name]):
                workers = [num_workers] + [m * num_workers for m in SLOPE_WORKERS]
                decodes = [seconds[1]] + [codec_seconds(compressor, shape, dtype, k, runs)[1] for k in workers[1:]]
                per_worker.setdefault(nbytes, []).append(per_worker_slope(workers, decodes))
    sizes = sorted(by_size)
    encode = [(n, statistics.median(t[0] for *_, t in by_size[n])) for n in sizes]
    decode = [(n, statistics.median(t[1] for *_, t in by_size[n])) for n in sizes]
    slope = [(n, statistics.median(per_worker[n])) for n in sorted(per_worker)]
    return CompressorProfile(label, SizeTable(encode, f"{label} encode"), SizeTable(decode, f"{label} decode"),
                             payloads, decode_workers=num_workers,
                             decode_per_worker=SizeTable(slope, f"{label} decode per worker") if slope else None)


def addest(max_bytes, runs=7):
    """Zhang's AddEst: seconds of a float32 vector add, at powers of 4 from 4 KiB to max_bytes."""
    points, n = [], 1024
    while True:
        a = tf.ones([n], tf.float32)
        b = tf.ones([n], tf.float32)
        add = tf.function(lambda: a + b)
        points.append((4.0 * n, median_s(lambda: add().numpy(), runs)))
        if 4 * n >= max_bytes:
            return SizeTable(points, "AddEst")
        n *= 4


def finite_scan(max_bytes, runs=7):
    """Seconds of tfcomp's exchange's finite check of one float32 gradient (exchange.all_workers_finite:
    is_finite reduced to one flag), at powers of 4 from 4 KiB to max_bytes: timestamps inside one
    compiled call, as the exchange runs it among its other ops (a call of its own would add the
    call's dispatch, about 0.15 ms, to every gradient)."""
    points, n = [], 1024
    with control_dependencies_kept():
        while True:
            x = tf.ones([n], tf.float32)

            @tf.function
            def timed(g):
                start = tf.timestamp()
                with tf.control_dependencies([start]):
                    flag = tf.reduce_all(tf.math.is_finite(tf.identity(g)))
                with tf.control_dependencies([flag]):
                    return tf.timestamp() - start

            timed(x)
            points.append((4.0 * n, statistics.median(float(timed(x)) for _ in range(runs))))
            if 4 * n >= max_bytes:
                return SizeTable(points, "finite scan")
            n *= 4


def profile(model, gradients, links, compressors, num_workers, runs=7, say=None, measured=None, half_extra=None):
    """The Profile of a model (a ModelProfile) with gradients [(name, shape, dtype)] in its
    order, over links ({collective: Link}; half_extra: the float16 allreduce's extra cost,
    link_probe.half_extra): every compressor of {spec: compressor} measured on the
    gradients' shapes (unless measured, {spec: CompressorProfile}, has it; what is
    measured is added there), the vector-add cost and the finite check's."""
    profiles = measured if measured is not None else {}
    for spec, compressor in compressors.items():
        if spec in profiles:
            continue
        if say is not None:
            say(f"measuring {spec} on {len(gradients)} gradients ...")
        profiles[spec] = compressor_profile(spec, compressor, gradients, num_workers, runs)
    largest = max(g.nbytes for g in model.gradients)
    return Profile(model, links[ALLREDUCE], links[ALLGATHER], addest(largest, runs),
                   {spec: profiles[spec] for spec in compressors}, finite_scan(largest, runs), half_extra)
