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

from tfcomp.engines import agreement
from tfcomp.engines import peers
from tfcomp.state import variables as state_lib
from tfcomp.compressors.cast import FP16, NoCompression
from tfcomp.exchange import hooks
from tfcomp.exchange.step import Exchange
from tfcomp.exchange.fusion import positions_by_dtype
from tfcomp.keras.optimizers import bind_exchange

ENGINE_ATTRIBUTE = "tfcomp_engine"  # where an optimizer keeps its HorovodEngine (not checkpointed)


class HorovodCollectives:
    """The exchange's collective interface on Horovod: one grouped (fused)
    allreduce or allgather per call, over the global process set."""

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


class HorovodEngine:
    """Averages (op=hvd.Average) or sums (hvd.Sum) gradients over all Horovod
    ranks through tfcomp's Exchange. Construct it on every rank (it compares
    the ranks' exchanges, so a rank that disagrees fails here, not in a step).

    watch_peers: keep a connection to every other rank (tfcomp.engines.peers), so that
    a rank killed mid-step is named, with the step, on every other rank.
    """

    def __init__(self, compression=None, op=hvd.Average, device="", watch_peers=True, **exchange_options):
        self.exchange = Exchange(tfcomp_compression(compression), **exchange_options)
        if not hvd.is_initialized():
            raise RuntimeError("call hvd.init() before creating tfcomp's Horovod optimizer or tape")
        self.reduce_op = "mean" if op == hvd.Average else "sum"
        self.device = device
        self.collectives = HorovodCollectives(device)
        self.description = self._describe(self.exchange, op, device)
        with tf.init_scope():  # runs eagerly, also when first built inside a traced step
            agreement.check_workers_agree(self.exchange, self._gather_ints, hvd.rank(), worker_word="rank")
            agreement.share_compression_profile(self.exchange, self._average_floats)
            self.peer_watch = self._watch_peers() if watch_peers and hvd.size() > 1 else None
        if self.exchange.controller is not None:
            self.exchange.controller.workers = hooks.Workers("horovod", hvd.rank(), hvd.size(), self._average_floats,
                                                 self._gather_ints)

    @staticmethod
    def _watch_peers():
        listener, port = peers.listen()
        host = peers.ipv4_as_int(os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname())
        gathered = hvd.allgather(tf.constant([[host, port, os.getpid()]], tf.int64), name="tfcomp.engines.peers")
        gathered = gathered.numpy().tolist()
        hosts = [peers.int_as_ipv4(h) for h, _, _ in gathered]
        ranks = [peers.Peer(r, f"rank {r}", hosts[r], pid) for r, (_, _, pid) in enumerate(gathered)]
        # Horovod's own collectives fail when a rank's connections drop; the watch names it.
        return peers.PeerWatch(hvd.rank(), ranks, listener, hosts, [p for _, p, _ in gathered])

    @classmethod
    def describe(cls, compression, op, device, exchange_options):
        """What an engine made with these arguments does, comparable with .description."""
        exchange_options = {k: v for k, v in exchange_options.items() if k != "watch_peers"}
        return cls._describe(Exchange(tfcomp_compression(compression), **exchange_options), op, device)

    @staticmethod
    def _describe(exchange, op, device):
        return f"{agreement.fingerprint(exchange)[0]}, op={'Average' if op == hvd.Average else 'Sum'}, device={device!r}"

    @staticmethod
    def _gather_ints(value):
        return hvd.allgather(tf.constant([value], tf.int64), name="tfcomp.fingerprint").numpy().tolist()

    @staticmethod
    def _average_floats(values):
        averaged = hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Average, name="tfcomp.profile")
        return averaged.numpy().tolist()

    def payload_bytes(self, variables):
        """Bytes one rank sends per step for these (trainable) variables."""
        return self.exchange.payload_bytes([(v.shape, v.dtype) for v in variables], hvd.size(),
                                           [v.name for v in variables])

    def reduce(self, grads, variables, owner):
        """The reduced gradients (None stays None), in order; state lives on owner."""
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return list(grads)
        flat = [grads[i] for i in present]
        names = [variables[i].name for i in present]
        shapes = [(g.shape, g.dtype) for g in flat]
        bind_exchange(self.exchange, owner)
        # Each rank saves its own rows: Horovod programs checkpoint on rank 0 alone.
        state = state_lib.state_of(owner, self.exchange.state_specs(shapes, names, hvd.size()),
                                   self.exchange.choices(shapes, names),
                                   device=self.device or None, num_workers=hvd.size(), rank=hvd.rank(),
                                   own_rows=True)
        with tf.device(self.device):
            if self.peer_watch is not None:
                with tf.control_dependencies([self.peer_watch.mark_step(state.step, self.device or None)]):
                    flat = [tf.identity(g) for g in flat]
            reduced = self.exchange.reduce(flat, names, state, self.collectives, self.reduce_op)
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out


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
