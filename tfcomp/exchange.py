"""The gradient exchange of one step, written once for every engine:

plan (compress, or send dense) -> compress -> fuse -> collectives -> unfuse ->
finish (decompress / aggregate), repeated for multi-round compressors.

An engine supplies the collectives: an object with `num_workers`,
`allreduce(buffers)` (elementwise sums) and `allgather(buffers)` (the workers'
1-D buffers concatenated in rank order).
"""
import tensorflow as tf

from tfcomp import fusion
from tfcomp.compressors.base import Round, TensorContext, resolve
from tfcomp.compressors.cast import NoCompression

DEFAULT_BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's and the ACP-SGD paper's bucket
DEFAULT_MIN_COMPRESS_ELEMENTS = 1024


class Exchange:
    """Averages gradients across workers with a compressor.

    Tensors that are 1-D, smaller than min_compress_elements, or not floating
    point go dense (exact allreduce); IndexedSlices are made dense first.
    Dense payloads fuse into buckets of bucket_bytes; compressed payloads into
    buckets of bucket_bytes times their compression rate.
    """

    def __init__(self, compression=None, *, min_compress_elements=DEFAULT_MIN_COMPRESS_ELEMENTS,
                 bucket_bytes=DEFAULT_BUCKET_BYTES, global_seed=0):
        if not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be a positive number of bytes, got {bucket_bytes!r}")
        if not isinstance(min_compress_elements, int) or min_compress_elements < 0:
            raise ValueError(f"min_compress_elements must be an integer >= 0, got {min_compress_elements!r}")
        self.compressor = resolve(compression)
        self.dense = self.compressor if isinstance(self.compressor, NoCompression) else NoCompression()
        self.min_compress_elements = min_compress_elements
        self.bucket_bytes = bucket_bytes
        self.global_seed = global_seed

    def config(self):
        """Everything that must be the same on every worker."""
        return {"compressor": self.compressor.config(), "min_compress_elements": self.min_compress_elements,
                "bucket_bytes": self.bucket_bytes, "global_seed": self.global_seed}

    def plan(self, shape, dtype):
        """The compressor for a tensor of this shape and dtype."""
        shape = tf.TensorShape(shape)
        dtype = tf.as_dtype(dtype)
        if (not dtype.is_floating or shape.rank is None or shape.rank <= 1
                or shape.num_elements() < self.min_compress_elements):
            return self.dense
        return self.compressor

    def state_specs(self, shapes_and_dtypes, names):
        """{tensor name: {state name: (shape, dtype)}} of the compressor state these tensors need."""
        specs = {}
        for (shape, dtype), name in zip(shapes_and_dtypes, names):
            specs[name] = self.plan(shape, dtype).state_specs(tf.TensorShape(shape), tf.as_dtype(dtype))
        return specs

    def payload_bytes(self, shapes_and_dtypes):
        """Bytes one worker sends into the collectives per step."""
        return sum(self.plan(s, d).payload_bytes(s, d) for s, d in shapes_and_dtypes)

    def reduce(self, grads, names, state, collectives, reduce_op="mean"):
        """The averaged (or, with reduce_op="sum", summed) gradients, in order."""
        if reduce_op not in ("mean", "sum"):
            raise ValueError(f"reduce_op must be 'mean' or 'sum', got {reduce_op!r}")
        grads = [_dense(g, n) for g, n in zip(grads, names)]
        k = collectives.num_workers
        state.build(self.state_specs([(g.shape, g.dtype) for g in grads], names))
        pending = []
        for i, (grad, name) in enumerate(zip(grads, names)):
            compressor = self.plan(grad.shape, grad.dtype)
            variables = state.get(name)
            ctx = TensorContext(name, k, state.step, self.global_seed, average=reduce_op == "mean")
            pending.append((i, compressor is not self.dense, compressor.compress(grad, variables, ctx)))
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
        with tf.control_dependencies(results):
            state.step.assign_add(1)
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
