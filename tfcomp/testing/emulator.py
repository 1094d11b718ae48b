"""An in-process K-worker engine: K threads, one per worker, each running the
same Exchange as a real engine, with collectives that meet at a barrier.

Every worker computes a collective's result from all workers' inputs in rank
order, so results are bitwise identical across workers, as with a real ring.
"""
import threading

import tensorflow as tf

from tfcomp.exchange import Exchange
from tfcomp.fusion import WIRE_DTYPES
from tfcomp.state import CompressionState


class _Meeting:
    """Where the K workers' threads swap their buffers for one collective."""

    def __init__(self, num_workers):
        self.num_workers = num_workers
        self.barrier = threading.Barrier(num_workers)
        self.slots = [None] * num_workers
        self.log = []  # (collective, bytes of one buffer sent by one worker), per buffer

    def swap(self, rank, kind, buffers):
        for b in buffers:  # the real engines' collectives move these dtypes only
            if b.dtype not in WIRE_DTYPES:
                raise TypeError(f"{kind} of a {b.dtype.name} buffer: TensorFlow's collectives take "
                                f"{', '.join(d.name for d in WIRE_DTYPES)}")
        self.slots[rank] = buffers
        self.barrier.wait()
        everyone = list(self.slots)
        if rank == 0:
            self.log.extend((kind, b.shape.num_elements() * b.dtype.size) for b in buffers)
        self.barrier.wait()  # nobody overwrites a slot before all have read them
        return everyone


class _WorkerCollectives:
    def __init__(self, rank, meeting):
        self.rank = rank
        self.meeting = meeting
        self.num_workers = meeting.num_workers

    def allreduce(self, buffers):
        everyone = self.meeting.swap(self.rank, "allreduce", buffers)
        return [tf.add_n([worker[i] for worker in everyone]) for i in range(len(buffers))]

    def allgather(self, buffers):
        everyone = self.meeting.swap(self.rank, "allgather", buffers)
        return [tf.concat([worker[i] for worker in everyone], 0) for i in range(len(buffers))]


class Emulator:
    """K workers in one process, each with its own CompressionState.

        emu = Emulator(2, tfcomp.EFSignSGD)
        averaged = emu.step([grads_of_worker0, grads_of_worker1], names)
    """

    def __init__(self, num_workers, compression=None, **exchange_options):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.exchange = Exchange(compression, **exchange_options)
        self.states = [CompressionState(name=f"worker{r}_state") for r in range(num_workers)]
        self.meeting = _Meeting(num_workers)

    @property
    def traffic(self):
        """[(collective, bytes one worker sent)] for every fused buffer so far."""
        return list(self.meeting.log)

    def step(self, grads_per_worker, names, reduce_op="mean"):
        """Runs one exchange on every worker; returns each worker's reduced gradients."""
        if len(grads_per_worker) != self.num_workers:
            raise ValueError(f"expected gradients of {self.num_workers} workers, got {len(grads_per_worker)}")
        results = [None] * self.num_workers
        errors = []

        def run(rank):
            try:
                results[rank] = self.exchange.reduce(
                    grads_per_worker[rank], names, self.states[rank],
                    _WorkerCollectives(rank, self.meeting), reduce_op)
            except BaseException as err:  # surfaced below; the barrier releases the others
                errors.append(err)
                self.meeting.barrier.abort()

        threads = [threading.Thread(target=run, args=(r,)) for r in range(self.num_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.meeting.barrier.reset()
            raise errors[0]
        return results
