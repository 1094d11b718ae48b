"""The gradient exchange of one step, written once for every engine:

plan (compress, or send dense) -> compress -> fuse -> collectives -> unfuse ->
finish (decompress / aggregate), repeated for multi-round compressors.

An engine supplies the collectives: an object with `num_workers`,
`allreduce(buffers)` (elementwise sums) and `allgather(buffers)` (the workers'
1-D buffers concatenated in rank order).
"""
import tensorflow as tf
from absl import logging

from tfcomp import fusion
from tfcomp.compressors.base import Round, TensorContext, resolve
from tfcomp.compressors.cast import NoCompression
from tfcomp.selection import EfficiencyAwareSelection

DEFAULT_BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's and the ACP-SGD paper's bucket
DEFAULT_MIN_COMPRESS_ELEMENTS = 1024


class Exchange:
    """Averages gradients across workers with a compressor.

    Tensors that are 1-D, smaller than min_compress_elements, or not floating
    point go dense (exact allreduce); IndexedSlices are made dense first. With
    a selection (tfcomp.selection.EfficiencyAwareSelection; by default for
    compressors that ask for it, such as DRAGONN; selection=False forces
    compression), a tensor is compressed only where that saves time. The first
    warmup_steps steps send everything dense. Dense payloads fuse into buckets
    of bucket_bytes; compressed payloads into buckets of bucket_bytes times
    their compression rate.
    """

    def __init__(self, compression=None, *, min_compress_elements=DEFAULT_MIN_COMPRESS_ELEMENTS,
                 bucket_bytes=DEFAULT_BUCKET_BYTES, global_seed=0, selection=None, warmup_steps=0):
        if not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be a positive number of bytes, got {bucket_bytes!r}")
        if not isinstance(min_compress_elements, int) or min_compress_elements < 0:
            raise ValueError(f"min_compress_elements must be an integer >= 0, got {min_compress_elements!r}")
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {warmup_steps!r}")
        self.compressor = resolve(compression)
        self.dense = self.compressor if isinstance(self.compressor, NoCompression) else NoCompression()
        self.min_compress_elements = min_compress_elements
        self.bucket_bytes = bucket_bytes
        self.global_seed = global_seed
        self.warmup_steps = max(warmup_steps, self.compressor.warmup_steps)
        self._said_dense = set()
        if selection is None:
            selection = EfficiencyAwareSelection() if self.compressor.efficiency_aware else False
        self.selection = selection or None

    def config(self):
        """Everything that must be the same on every worker."""
        return {"compressor": self.compressor.config(), "min_compress_elements": self.min_compress_elements,
                "bucket_bytes": self.bucket_bytes, "global_seed": self.global_seed,
                "warmup_steps": self.warmup_steps,
                "selection": self.selection.config() if self.selection else None}

    def plan(self, shape, dtype, num_workers):
        """The compressor for a tensor of this shape and dtype among num_workers."""
        shape = tf.TensorShape(shape)
        dtype = tf.as_dtype(dtype)
        if (not dtype.is_floating or shape.rank is None or shape.rank <= 1
                or shape.num_elements() < self.min_compress_elements):
            return self.dense
        accepted, why = self.compressor.accepts(shape, dtype)
        if not accepted:
            self._say_dense_once(shape, why)
            return self.dense
        if self.selection and not self.selection.worth_compressing(self.compressor, shape, dtype, num_workers):
            return self.dense
        return self.compressor

    def _say_dense_once(self, shape, why):
        key = (tuple(shape.as_list()), why)
        if key not in self._said_dense:
            self._said_dense.add(key)
            logging.info("tfcomp: %s sends a %s tensor dense: %s", type(self.compressor).__name__,
                         "x".join(map(str, shape.as_list())), why)

    def state_specs(self, shapes_and_dtypes, names, num_workers):
        """{tensor name: {state name: (shape, dtype)}} of the compressor state these tensors need."""
        specs = {}
        for (shape, dtype), name in zip(shapes_and_dtypes, names):
            compressor = self.plan(shape, dtype, num_workers)
            specs[name] = compressor.state_specs(tf.TensorShape(shape), tf.as_dtype(dtype))
        return specs

    def payload_bytes(self, shapes_and_dtypes, num_workers):
        """Bytes one worker sends into the collectives per step (after warm-up)."""
        return sum(self.plan(s, d, num_workers).payload_bytes(s, d) for s, d in shapes_and_dtypes)

    def reduce(self, grads, names, state, collectives, reduce_op="mean"):
        """The averaged (or, with reduce_op="sum", summed) gradients, in order."""
        if reduce_op not in ("mean", "sum"):
            raise ValueError(f"reduce_op must be 'mean' or 'sum', got {reduce_op!r}")
        grads = [_dense(g, n) for g, n in zip(grads, names)]
        k = collectives.num_workers
        state.build(self.state_specs([(g.shape, g.dtype) for g in grads], names, k))
        plans = [self.plan(g.shape, g.dtype, k) for g in grads]

        def run(plans, phase=0):
            return lambda: self._exchange(grads, names, plans, state, collectives, reduce_op, phase)

        # Every worker counts the same steps, so all take the same branches.
        phases = max(c.phases for c in plans) if plans else 1
        compressed = run(plans)
        if phases > 1:
            branches = [run(plans, phase) for phase in range(phases)]
            compressed = lambda: tf.switch_case(tf.cast(state.step % phases, tf.int32), branches)
        if self.warmup_steps:
            results = tf.cond(state.step < self.warmup_steps, run([self.dense] * len(grads)), compressed)
        else:
            results = compressed()
        with tf.control_dependencies(results):
            state.step.assign_add(1)
        return results

    def _exchange(self, grads, names, plans, state, collectives, reduce_op, phase):
        """Compresses, communicates and decompresses every tensor by its plan."""
        pending = []
        for i, (grad, name, compressor) in enumerate(zip(grads, names, plans)):
            ctx = TensorContext(name, collectives.num_workers, state.step, self.global_seed,
                                average=reduce_op == "mean", phase=phase % compressor.phases)
            pending.append((i, compressor is not self.dense, compressor.compress(grad, state.get(name), ctx)))
        results = [None] * len(grads)
        while pending:
            returned = self._run_round(pending, grads, collectives)
            next_pending = []
            for (i, compressed, rnd), outputs in zip(pending, returned):
                out = rnd.finish(outputs)
                if isinstance(out, Round):
                    next_pending.append((i, compressed, out))
                else:
                    results[i] = out
            pending = next_pending
        return results

    def _run_round(self, pending, grads, collectives):
        """Runs one round's collectives for every pending tensor; outputs per tensor."""
        slots = {}  # (collective, compressed) -> [(tensor position, payload index, tensor)]
        for pos, (i, compressed, rnd) in enumerate(pending):
            for j, payload in enumerate(rnd.payloads):
                slots.setdefault((payload.collective, compressed), []).append((pos, j, payload.tensor))
        outputs = [[None] * len(rnd.payloads) for _, _, rnd in pending]
        for (kind, compressed), entries in slots.items():
            cap = self.bucket_bytes
            if compressed:
                sent = sum(fusion.nbytes(t) for _, _, t in entries)
                dense = sum(fusion.nbytes(grads[pending[pos][0]]) for pos in {p for p, _, _ in entries})
                cap = max(1, int(self.bucket_bytes * sent / max(dense, 1)))
            tensors = [t for _, _, t in entries]
            for (pos, j, _), out in zip(entries, fusion.run_collective(kind, tensors, collectives, cap)):
                outputs[pos][j] = out
        return outputs


def _dense(grad, name):
    if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
    if not grad.shape.is_fully_defined():
        raise ValueError(f"gradient {name!r} has shape {grad.shape}: tfcomp's payloads have fixed "
                         "capacity, so every gradient needs a fully defined static shape")
    return grad
