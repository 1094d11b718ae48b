"""The Horovod engine: tfcomp's Exchange run with Horovod's collectives.

The optimizer wrapper and the gradient tape both hand their gradients to a
HorovodEngine, which holds the Exchange and finds the compressor state on the
object that owns it (the Keras optimizer), so checkpoints carry it.
"""
import os
import socket

import horovod.tensorflow as hvd
import tensorflow as tf
from horovod.tensorflow.compression import Compressor as HorovodCompressor
from horovod.tensorflow.compression import FP16Compressor, NoneCompressor

from tfcomp.compressors.cast import FP16, NoCompression
from tfcomp.engines import agreement, peers
from tfcomp.engines.engine import Engine
from tfcomp.exchange.fusion import positions_by_dtype
from tfcomp.exchange.step import Exchange

ENGINE_ATTRIBUTE = "tfcomp_engine"  # where an optimizer keeps its HorovodEngine (not checkpointed)


class HorovodCollectives:
    """The exchange's collective interface on Horovod: one grouped (fused)
    allreduce or allgather per call, over the global process set."""

    #: Horovod's coordinator matches every rank's collectives by name and runs them in
    #: one order it decides, so the exchange need not chain them (step.InOrder).
    matched_by_name = True

    def __init__(self, device=""):
        self.num_workers = hvd.size()
        self._device = device

    def allreduce(self, buffers):
        """Sums; one grouped allreduce per dtype, since Horovod's takes one dtype per group
        (a plan's round can hold FP16's float16 payloads beside PowerSGD's float32 factors)."""
        buffers = list(buffers)
        summed = [None] * len(buffers)
        for indices in positions_by_dtype(buffers).values():
            group = hvd.grouped_allreduce([buffers[i] for i in indices], op=hvd.Sum, device_dense=self._device)
            for i, out in zip(indices, group):
                summed[i] = out
        return summed

    def allgather(self, buffers):
        return hvd.grouped_allgather(list(buffers))


def tfcomp_compression(compression):
    """compression= as tfcomp takes it: Horovod's Compression.none and .fp16 are
    tfcomp's NoCompression and FP16; anything else (a tfcomp compressor or
    tfcomp.Plan) passes on to tfcomp."""
    def horovods(cls):
        return isinstance(compression, cls) or (isinstance(compression, type) and issubclass(compression, cls))

    if horovods(NoneCompressor):
        return NoCompression
    if horovods(FP16Compressor):
        return FP16
    if horovods(HorovodCompressor):
        raise ValueError(
            f"compression={compression!r} is a Horovod compressor other than Compression.none/fp16; "
            f"tfcomp runs its own compressors (tfcomp.DRAGONN, tfcomp.PowerSGD, ...): pass one of those")
    return compression


def check_horovod_arguments(op, gradient_predivide_factor, groups, process_set):
    """Horovod arguments tfcomp does not take, refused with the reason."""
    if op not in (hvd.Average, hvd.Sum):
        raise ValueError(f"op must be hvd.Average or hvd.Sum with tfcomp's compressors, got {op!r}")
    if gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor is not supported: tfcomp's compressors average "
                         "(or sum) the gradients themselves")
    if groups:
        raise ValueError("num_groups/groups are not supported: tfcomp fuses payloads into buckets of "
                         "its own (pass bucket_bytes= to size them)")
    if process_set is not hvd.global_process_set:
        raise ValueError("tfcomp's Horovod engine reduces over the global process set only")


class HorovodEngine(Engine):
    """Averages (op=hvd.Average) or sums (hvd.Sum) gradients over all Horovod
    ranks through tfcomp's Exchange. Construct it on every rank (it compares
    the ranks' exchanges, so a rank that disagrees fails here, not in a step).

    watch_peers: keep a connection to every other rank (tfcomp.engines.peers), so that
    a rank killed mid-step is named, with the step, on every other rank.
    """

    kind = "horovod"
    worker_word = "rank"
    # on_peer_loss stays None: Horovod's own collectives fail when a rank's connections
    # drop; the watch names it.

    def __init__(self, compression=None, op=hvd.Average, device="", watch_peers=True, **exchange_options):
        exchange = Exchange(tfcomp_compression(compression), **exchange_options)
        if not hvd.is_initialized():
            raise RuntimeError("call hvd.init() before creating tfcomp's Horovod optimizer or tape")
        super().__init__(exchange, rank=hvd.rank(), num_workers=hvd.size())
        self.reduce_op = "mean" if op == hvd.Average else "sum"
        self.device = device
        self.collectives = HorovodCollectives(device)
        self.description = self._describe(self.exchange, op, device)
        with tf.init_scope():  # runs eagerly, also when first built inside a traced step
            self.start(watch_peers)

    def gather_ints(self, values):
        return hvd.allgather(tf.constant([values], tf.int64), name="tfcomp.gather_ints").numpy().tolist()

    def mean_floats(self, values):
        averaged = hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Average, name="tfcomp.mean_floats")
        return averaged.numpy().tolist()

    def peer_identity(self):
        return [self.rank, peers.ipv4_as_int(os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname())]

    def describe_peer(self, identity):
        rank, host = identity[0], peers.int_as_ipv4(identity[1])
        return f"rank {rank}", host, host

    @classmethod
    def describe(cls, compression, op, device, exchange_options):
        """What an engine made with these arguments does, comparable with .description."""
        exchange_options = {k: v for k, v in exchange_options.items() if k != "watch_peers"}
        return cls._describe(Exchange(tfcomp_compression(compression), **exchange_options), op, device)

    @staticmethod
    def _describe(exchange, op, device):
        return f"{agreement.fingerprint(exchange)[0]}, op={'Average' if op == hvd.Average else 'Sum'}, device={device!r}"

    def reduce(self, grads, variables, owner):
        """The reduced gradients (None stays None), in order; state lives on owner."""
        # Each rank saves its own rows: Horovod programs checkpoint on rank 0 alone.
        return self.reduce_gradients(grads, variables, owner, self.collectives, self.reduce_op,
                                     device=self.device or None, own_rows=True)


class LocalVariables:
    """Variables whose gradients stay on their rank (Horovod's register_local_var):
    not exchanged, and divided by the number of ranks if scale is set."""

    def __init__(self, scale):
        self.scale = scale
        self._refs = set()

    def add(self, variable):
        self._refs.add(variable.ref())

    def reduce(self, engine, grads, variables, owner):
        local = [v.ref() in self._refs for v in variables]
        reduced = engine.reduce([None if is_local else g for g, is_local in zip(grads, local)], variables, owner)
        return [self._local(g) if is_local else r for g, r, is_local in zip(grads, reduced, local)]

    def _local(self, grad):
        return grad / hvd.size() if self.scale and grad is not None else grad
