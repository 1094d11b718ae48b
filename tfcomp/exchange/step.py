"""The gradient exchange of one step, written once for every engine:

plan (compress, or send dense) -> compress -> fuse -> collectives -> unfuse ->
finish (decompress / aggregate), repeated for multi-round compressors.

An engine supplies the collectives: an object with `num_workers`,
`allreduce(buffers)` (elementwise sums) and `allgather(buffers)` (the workers'
1-D buffers concatenated in rank order).
"""
import math

import tensorflow as tf
from absl import logging

from tfcomp.compressors.base import EPOCH, Round, TensorContext, checked_warmup_steps
from tfcomp.compressors.cast import NoCompression
from tfcomp.compressors.registry import resolve
from tfcomp.exchange import fusion, hooks
from tfcomp.exchange.buckets import DEFAULT_BUCKET_BYTES, buckets
from tfcomp.exchange.selection import EfficiencyAwareSelection

DEFAULT_MIN_COMPRESS_ELEMENTS = 1024
FINITE_FLAG_BYTES = 4  # the float32 flag every worker allreduces per step (check_finite)
#: Dense steps a warm-up of one epoch stands for where the epoch's length is not known
#: (no steps_per_epoch, and the engine saw no training data of known size): PyTorch's
#: PowerSGD hook's default start (start_powerSGD_iter=1000).
UNKNOWN_EPOCH_STEPS = 1000
_NOT_KNOWN = "the epoch's length is not known"


class Exchange:
    """Averages gradients across workers with a compressor, or a compressor per
    tensor (a tfcomp.Plan: tensors then need their names, see plan()).

    Tensors that are 1-D, smaller than min_compress_elements, or not floating
    point go dense (exact allreduce); IndexedSlices are made dense first. With
    a selection (tfcomp.exchange.selection.EfficiencyAwareSelection; by default for
    compressors that ask for it, such as DRAGONN; selection=False forces
    compression; off under a Plan, which is the choice), a tensor is
    compressed only where that saves time. The first warmup_steps steps send
    everything dense: the most that the option and the compressors ask for
    (the sparsifiers and the low-rank ones ask for one epoch by default). An
    epoch is steps_per_epoch steps where given, else the length of the
    training data the engine learned (learn_steps_per_epoch: the strategy's
    distributed dataset of known size), else UNKNOWN_EPOCH_STEPS. Under a
    controller (tfcomp.Auto) only the option applies: Auto's dense profiling
    is its dense start.

    Pipeline: tensors go in buckets of at most bucket_bytes, in the order the
    backward pass makes them (the last layers' first, pipeline()). Each
    bucket's warm-up and phase, compression, collectives (its payloads fused,
    per collective) and decompression depend on its gradients alone, so in a
    compiled step a bucket is exchanged while backward still computes the
    next; the collectives go in bucket order, the same on every worker.

    Non-finite gradients (check_finite=True): each bucket checks its own
    gradients; where they hold a NaN or Inf its compressors are given zeros
    instead, so they never see one. After every bucket's collectives the
    workers sum one flag, "my gradients hold a NaN or Inf"; on a step where
    any worker's do, every worker gets NaN for every floating-point gradient
    and every compressor state variable is put back to what the step found
    (residuals, momentum, factors; the step counter, and so the phase, does
    not advance), so Keras' LossScaleOptimizer skips the step on all workers
    alike and error feedback is not poisoned. The step counter counts
    exchanged steps only. Where nothing is compressed (NoCompression, an
    all-dense plan, tfcomp.Auto while it runs dense) there is no state to
    protect and no flag is sent: a non-finite gradient reaches only its own
    aggregate, as under the engine's own dense allreduce, and the step costs
    what the engine's does (benchmarks/results/dense_reference.md).
    """

    def __init__(self, compression=None, *, min_compress_elements=DEFAULT_MIN_COMPRESS_ELEMENTS,
                 bucket_bytes=DEFAULT_BUCKET_BYTES, global_seed=0, selection=None, warmup_steps=0,
                 steps_per_epoch=None, check_finite=True):
        if not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be a positive number of bytes, got {bucket_bytes!r}")
        if not isinstance(min_compress_elements, int) or min_compress_elements < 0:
            raise ValueError(f"min_compress_elements must be an integer >= 0, got {min_compress_elements!r}")
        checked_warmup_steps("the exchange", warmup_steps)
        if steps_per_epoch is not None and not (isinstance(steps_per_epoch, int) and steps_per_epoch >= 1):
            raise ValueError(f"steps_per_epoch must be an integer >= 1 or None (not known), got {steps_per_epoch!r}")
        if not isinstance(check_finite, bool):
            raise ValueError(f"check_finite must be True or False, got {check_finite!r}")
        self.check_finite = check_finite
        self.min_compress_elements = min_compress_elements
        self.bucket_bytes = bucket_bytes
        self.global_seed = global_seed
        self.controller = compression if isinstance(compression, hooks.Controller) else None
        if self.controller is not None:
            name = type(self.controller).__name__
            if self.controller.exchange is not None:
                raise ValueError(f"this tfcomp.{name} already decides for another strategy or optimizer; "
                                 f"make one {name} for each")
            if selection:
                raise ValueError(f"tensor selection does not apply to tfcomp.{name}: its plan says what each "
                                 f"tensor runs with; drop selection={selection!r}")
            self.controller.exchange = self
        self._warmup_option = warmup_steps
        self.steps_per_epoch = steps_per_epoch
        self._learned_steps_per_epoch = None
        self._configure(self.controller.current() if self.controller is not None else compression, selection)
        self.traces = 0  # how often reduce was traced (run eagerly: called)

    def _configure(self, compression, selection=False):
        # As the user made it (momentum="auto" unresolved): a compressor, or a Plan.
        self.configured = compression if isinstance(compression, hooks.PerTensor) else resolve(compression)
        self.compressor = self.configured  # what runs: bind resolves momentum
        self._bound = None
        self.dense = self.compressor if isinstance(self.compressor, NoCompression) else NoCompression()
        self._said_dense = set()
        if self.is_plan:
            if selection:
                raise ValueError("tensor selection does not apply to a tfcomp.Plan: the plan already says what "
                                 f"each tensor runs with; drop selection={selection!r}")
            selection = False
        elif selection is None:
            selection = EfficiencyAwareSelection() if self.compressor.efficiency_aware else False
        self.selection = selection or None

    def use(self, compression):
        """Runs compression (a tfcomp.Plan, or NoCompression) from the next trace on:
        tfcomp.Auto's switch. The engine's next trace binds it to the optimizer."""
        if self.controller is None:
            raise ValueError("only an exchange under a controller (tfcomp.Auto) changes what it runs")
        self._configure(compression)

    def _asked_warmups(self):
        own = [] if self.controller is not None else [c.warmup_steps for c in self.compressors()]
        return [self._warmup_option, *own]

    @property
    def asks_for_an_epoch(self):
        """Whether the dense warm-up depends on the epoch's length, not yet known."""
        return EPOCH in self._asked_warmups() and self.steps_per_epoch is None

    @property
    def epoch_steps(self):
        """(steps an epoch of warm-up stands for, where that number comes from)."""
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch, "steps_per_epoch"
        if self._learned_steps_per_epoch is not None:
            return self._learned_steps_per_epoch, "one epoch of the training data"
        return UNKNOWN_EPOCH_STEPS, _NOT_KNOWN

    @property
    def warmup_steps(self):
        """Dense steps before compression starts (see the class docstring)."""
        return max(self.epoch_steps[0] if w == EPOCH else w for w in self._asked_warmups())

    def learn_steps_per_epoch(self, steps):
        """The engine's word on how many steps an epoch of the training data is (None: not
        known). Taken until the step is first traced; the warm-up is fixed from then on."""
        if self.traces == 0:
            self._learned_steps_per_epoch = steps

    @property
    def is_plan(self):
        """Whether tensors run with compressors of their own (a tfcomp.Plan)."""
        return isinstance(self.configured, hooks.PerTensor)

    def compressors(self):
        """The compressors configured (a Plan's, each once; the one otherwise)."""
        return self.compressor.compressors() if self.is_plan else [self.compressor]

    def config(self):
        """Everything that must be the same on every worker."""
        compressor = self.controller.config() if self.controller is not None else self.configured.config()
        return {"compressor": compressor, "min_compress_elements": self.min_compress_elements,
                "bucket_bytes": self.bucket_bytes, "global_seed": self.global_seed,
                "warmup_steps": self._warmup_option, "steps_per_epoch": self.steps_per_epoch,
                "check_finite": self.check_finite,
                "selection": self.selection.config() if self.selection else None}

    def bind(self, resolve_compressor, owner):
        """Binds the compressors to the optimizer (owner) that applies the exchanged
        gradients: resolve_compressor(compressor) is the compressor that runs for it
        (tfcomp.keras.optimizers.bind_exchange resolves momentum="auto" so). Engines
        bind before state_specs. One optimizer per exchange: its momentum decides the
        compressor state."""
        if self.is_plan:
            resolved = self.configured.with_compressors(resolve_compressor)
        else:
            resolved = resolve_compressor(self.configured)
        if self._bound is not None and self._bound.config() != resolved.config():
            raise ValueError(f"this exchange already runs {self._bound!r} for another optimizer; "
                             f"{owner!r} would need {resolved!r}. Use one strategy or "
                             "DistributedOptimizer per optimizer.")
        if self.selection:  # worker momentum adds no compression time worth a new, unshared profile
            self.selection.same_profile(resolved, self.configured)
        self._bound = self.compressor = resolved

    def plan(self, shape, dtype, num_workers, name=None):
        """The compressor for a tensor of this shape and dtype among num_workers
        (and, under a Plan, of this name)."""
        compressor = self.eligible(shape, dtype, name)
        if (compressor is not self.dense and self.selection
                and not self.selection.worth_compressing(compressor, shape, dtype, num_workers)):
            return self.dense
        return compressor

    def chosen(self, name):
        """The compressor the user chose for tensor `name`, before any rule sends it dense."""
        if not self.is_plan:
            return self.compressor
        if name is None:
            raise ValueError("a tfcomp.Plan chooses compressors by tensor name: pass the tensors' names")
        compressor = self.compressor.choose(name)
        return self.dense if isinstance(compressor, NoCompression) else compressor

    def eligible(self, shape, dtype, name=None):
        """The chosen compressor, or dense where the tensor is 1-D, small, not floating
        point or not made smaller by it (tensor selection aside)."""
        compressor = self.chosen(name)
        shape = tf.TensorShape(shape)
        dtype = tf.as_dtype(dtype)
        if (compressor is self.dense or not dtype.is_floating or shape.rank is None or shape.rank <= 1
                or shape.num_elements() < self.min_compress_elements):
            return self.dense
        accepted, why = compressor.accepts(shape, dtype)
        if not accepted:
            self._say_dense_once(compressor, shape, why)
            return self.dense
        return compressor

    def _say_dense_once(self, compressor, shape, why):
        key = (type(compressor).__name__, tuple(shape.as_list()), why)
        if key not in self._said_dense:
            self._said_dense.add(key)
            logging.info("tfcomp: %s sends a %s tensor dense: %s", type(compressor).__name__,
                         "x".join(map(str, shape.as_list())), why)

    def choices(self, shapes_and_dtypes, names):
        """{tensor name: config of the compressor it runs with (None: dense)}, tensor
        selection aside: what a checkpoint records (tfcomp.state.record)."""
        return {name: None if c is self.dense else c.config()
                for (shape, dtype), name in zip(shapes_and_dtypes, names)
                for c in [self.eligible(shape, dtype, name)]}

    def pipeline(self, shapes_and_dtypes, names, num_workers):
        """The buckets the exchange runs as a pipeline: [[(positions, name, compressor)]],
        in the order the backward pass makes their gradients (the reverse of the
        tensors' order). A bucket holds consecutive tensors of at most bucket_bytes
        (dense bytes; a larger tensor is a bucket of its own); each bucket's
        compression, collectives and decompression depend on its own gradients only.

        Inside a bucket, compressors that batch same-shape tensors (the low-rank
        ones) get such tensors stacked, as one unit named after its members (under
        a Plan, tensors of the same compressor only); every other tensor is a unit
        of its own."""
        shapes_and_dtypes = list(shapes_and_dtypes)
        sizes = [tf.TensorShape(s).num_elements() * tf.as_dtype(d).size for s, d in shapes_and_dtypes]
        backward = list(range(len(sizes)))[::-1]
        return [self._units([backward[j] for j in reversed(group)], shapes_and_dtypes, names, num_workers)
                for group in buckets([sizes[i] for i in backward], self.bucket_bytes)]

    def units(self, shapes_and_dtypes, names, num_workers):
        """How tensors are compressed: [(positions, name, compressor)], the pipeline's buckets in turn."""
        return [unit for bucket in self.pipeline(shapes_and_dtypes, names, num_workers) for unit in bucket]

    def _units(self, positions, shapes_and_dtypes, names, num_workers):
        units, batched = [], {}
        for i in positions:
            (shape, dtype), name = shapes_and_dtypes[i], names[i]
            compressor = self.plan(shape, dtype, num_workers, name)
            key = (tuple(tf.TensorShape(shape).as_list()), tf.as_dtype(dtype), compressor)
            if compressor is not self.dense and compressor.batches_same_shape and key in batched:
                batched[key][0].append(i)
                continue
            unit = ([i], name, compressor)
            units.append(unit)
            if compressor is not self.dense and compressor.batches_same_shape:
                batched[key] = unit
        return [(positions, name if len(positions) == 1 else "+".join(names[i] for i in positions), c)
                for positions, name, c in units]

    def state_specs(self, shapes_and_dtypes, names, num_workers):
        """{unit name: {state name: (shape, dtype)}} of the compressor state these tensors need."""
        shapes_and_dtypes = list(shapes_and_dtypes)
        specs = {}
        for positions, name, compressor in self.units(shapes_and_dtypes, names, num_workers):
            shape, dtype = shapes_and_dtypes[positions[0]]
            unit = compressor.state_specs(tf.TensorShape(shape), tf.as_dtype(dtype))
            if len(positions) > 1:  # stacked: every state variable gains the batch axis
                unit = {k: ((len(positions), *s), d) for k, (s, d) in unit.items()}
            specs[name] = unit
        return specs

    def payload_bytes(self, shapes_and_dtypes, num_workers, names=None):
        """Bytes one worker sends into the collectives per step (after warm-up),
        the non-finite flag included. A Plan needs the tensors' names."""
        shapes_and_dtypes = list(shapes_and_dtypes)
        if names is None:
            if self.is_plan:
                raise ValueError("payload_bytes under a tfcomp.Plan needs the tensors' names (names=)")
            names = [None] * len(shapes_and_dtypes)
        compressors = [self.plan(s, d, num_workers, n) for (s, d), n in zip(shapes_and_dtypes, names)]
        flag = FINITE_FLAG_BYTES if self._checks(compressors) else 0
        return flag + sum(c.payload_bytes(s, d) for c, (s, d) in zip(compressors, shapes_and_dtypes))

    def _checks(self, compressors):
        """Whether the non-finite flag is sent: only where something is compressed."""
        return self.check_finite and any(c is not self.dense for c in compressors)

    def reduce(self, grads, names, state, collectives, reduce_op="mean"):
        """The averaged (or, with reduce_op="sum", summed) gradients, in order."""
        if reduce_op not in ("mean", "sum"):
            raise ValueError(f"reduce_op must be 'mean' or 'sum', got {reduce_op!r}")
        if self.controller is not None:
            self.controller.check_can_trace()
        if self.traces == 0 and EPOCH in self._asked_warmups():
            steps, source = self.epoch_steps
            if source == _NOT_KNOWN:
                logging.warning("tfcomp: the first %d steps send every gradient dense, one epoch (%s); pass "
                                "steps_per_epoch= or warmup_steps= to the strategy or DistributedOptimizer to "
                                "choose", steps, source)
            else:
                logging.info("tfcomp: the first %d steps send every gradient dense, one epoch (%s)", steps, source)
        self.traces += 1
        grads = [_dense(g, n) for g, n in zip(grads, names)]
        k = collectives.num_workers
        shapes_and_dtypes = [(g.shape, g.dtype) for g in grads]
        state.build(self.state_specs(shapes_and_dtypes, names, k))
        pipeline = self.pipeline(shapes_and_dtypes, names, k)
        checks = self._checks([c for bucket in pipeline for _, _, c in bucket])
        probe = hooks.observer()  # a tfcomp.callbacks.Timeline records this step
        if probe is not None:
            plan = {names[i]: (type(c).__name__, c.payload_bytes(*shapes_and_dtypes[i]))
                    for bucket in pipeline for positions, _, c in bucket for i in positions}
            grads = probe.gradients_ready(grads, names, plan, by_exchange=True)
            collectives = probe.timed(collectives)
        results = [None] * len(grads)
        flags, before = [], []  # per bucket: "my gradients are finite"; the state as the step found it
        last = None  # the last collective so far: the next one waits for it
        for index, bucket in enumerate(pipeline):
            if probe is not None:
                probe.bucket = index
            inputs = grads
            if checks:
                finite, inputs = self._locally_finite(bucket, grads)
                flags.append(finite)
                before += [(v, v.read_value()) for _, name, c in bucket if c is not self.dense
                           for v in (state.get(name) or {}).values()]
            outputs, last = self._bucket(bucket, inputs, names, state, collectives, reduce_op, last)
            for i, result in outputs.items():
                results[i] = result
        if checks:
            if probe is not None:  # the flag's allreduce, after the last decompression
                probe.bucket = None
                flags = probe.boundary("finite_check", flags, after=[*results, *flags])
            finite = all_workers_finite(flags, InOrder(collectives, last))
            results = tf.cond(finite, lambda: results,
                              lambda: [_nan_like(r) if r.dtype.is_floating else r for r in results])
            _undo_unless(finite, before)
            advance = tf.cast(finite, tf.int64)
        else:
            advance = 1
        if probe is not None:
            results = probe.gate(results, probe.mark("exchange_end", after=results))
        with tf.control_dependencies(results):
            state.step.assign_add(advance)
        return results

    def _locally_finite(self, bucket, grads):
        """(whether this worker's gradients in bucket are finite, grads with the bucket's
        compressed ones zeroed where they are not): compressors never see a NaN or Inf,
        so no op trips on one and the state they write stays finite until it is undone."""
        positions = [i for p, _, _ in bucket for i in p]
        floating = [grads[i] for i in positions if grads[i].dtype.is_floating]
        if not floating:
            return tf.constant(True), grads
        finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(g)) for g in floating]))
        compressed = [i for p, _, c in bucket if c is not self.dense for i in p]
        if not compressed:
            return finite, grads
        kept = tf.cond(finite, lambda: [grads[i] for i in compressed],
                       lambda: [tf.zeros_like(grads[i]) for i in compressed])
        inputs = list(grads)
        for i, g in zip(compressed, tf.nest.flatten(kept)):
            inputs[i] = g
        return finite, inputs

    def _bucket(self, bucket, grads, names, state, collectives, reduce_op, last):
        """({position: result}, its last collective) of one bucket, whose collectives
        follow `last`: its warm-up and phase decided for it alone. Every worker counts
        the same steps, so all take the same branches; a unit runs phase step % its
        phases (step % the bucket's lcm, taken modulo its phases)."""
        def run(units, phase=0):
            return lambda: self._exchange(grads, names, units, state, InOrder(collectives, last), reduce_op,
                                          phase)

        phases = math.lcm(*(c.phases for _, _, c in bucket))
        compressed = run(bucket)
        if phases > 1:
            branches = [run(bucket, phase) for phase in range(phases)]
            compressed = lambda: tf.switch_case(tf.cast(state.step % phases, tf.int32), branches)
        positions = [i for p, _, _ in bucket for i in p]
        if self.warmup_steps and any(c is not self.dense for _, _, c in bucket):
            dense = [([i], names[i], self.dense) for i in positions]
            outputs, last = tf.cond(state.step < self.warmup_steps, run(dense), compressed)
        else:
            outputs, last = compressed()
        return dict(zip(positions, outputs)), last

    def _exchange(self, grads, names, units, state, collectives, reduce_op, phase):
        """Compresses, communicates and decompresses units by their plan: (their results,
        in the order of the units' positions, the token of their last collective)."""
        inputs = [grads[p[0]] if len(p) == 1 else tf.stack([grads[i] for i in p]) for p, _, _ in units]
        pending = []
        for u, ((positions, name, compressor), grad) in enumerate(zip(units, inputs)):
            ctx = TensorContext(name, collectives.num_workers, state.step, self.global_seed,
                                average=reduce_op == "mean", phase=phase % compressor.phases,
                                batch=len(positions) if len(positions) > 1 else None,
                                members=tuple(names[i] for i in positions))
            pending.append((u, compressor is not self.dense, compressor.compress(grad, state.get(name), ctx)))
        outputs = [None] * len(units)
        probe = hooks.observer()
        while pending:
            returned = self._run_round(pending, inputs, collectives)
            if probe is not None:  # decompression starts when the round's collectives are done
                returned = probe.boundary("round_end", returned)
            next_pending = []
            for (u, compressed, rnd), payloads in zip(pending, returned):
                out = rnd.finish(payloads)
                if isinstance(out, Round):
                    next_pending.append((u, compressed, out))
                else:
                    outputs[u] = out
            pending = next_pending
        results = []
        for (positions, _, _), out in zip(units, outputs):
            results += [out] if len(positions) == 1 else tf.unstack(out)
        return results, collectives.token()

    def _run_round(self, pending, grads, collectives):
        """Runs one round's collectives for every pending tensor; outputs per tensor."""
        slots = {}  # (collective, compressed) -> [(tensor position, payload index, tensor)]
        for pos, (i, compressed, rnd) in enumerate(pending):
            for j, payload in enumerate(rnd.payloads):
                slots.setdefault((payload.collective, compressed), []).append((pos, j, payload.tensor))
        outputs = [[None] * len(rnd.payloads) for _, _, rnd in pending]
        # Compressed payloads first: a bucket's first collective also waits for the slowest
        # worker to get there, and the dense ones (biases) wait as well behind it.
        for (kind, compressed), entries in sorted(slots.items(), key=lambda slot: not slot[0][1]):
            cap = self.bucket_bytes
            if compressed:
                sent = sum(fusion.nbytes(t) for _, _, t in entries)
                dense = sum(fusion.nbytes(grads[pending[pos][0]]) for pos in {p for p, _, _ in entries})
                cap = max(1, int(self.bucket_bytes * sent / max(dense, 1)))
            tensors = [t for _, _, t in entries]
            for (pos, j, _), out in zip(entries, fusion.run_collective(kind, tensors, collectives, cap)):
                outputs[pos][j] = out
        return outputs


class InOrder:
    """An engine's collectives, each call made to wait for the one before; the first
    waits for `last` (a token(), or None). Buckets run in tf.cond branches of their
    own, which TensorFlow does not order, so this keeps the collectives in the
    exchange's order on every worker (tf.distribute's launcher runs here without
    its ordering token, which would order whole branches: a bucket's compression
    would wait for the last bucket's). Collectives with matched_by_name (Horovod's)
    pass through unchained."""

    def __init__(self, inner, last):
        self._inner = inner
        self.num_workers = inner.num_workers
        # An engine whose collectives are matched by name and run in one order its
        # coordinator decides (Horovod) needs no chain, and would pay a coordination
        # cycle for each link of one.
        self._chained = not getattr(inner, "matched_by_name", False)
        self._last = last if self._chained else None

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def allreduce(self, buffers):
        return self._call(self._inner.allreduce, buffers)

    def allgather(self, buffers):
        return self._call(self._inner.allgather, buffers)

    def _call(self, run, buffers):
        if not self._chained:
            return run(buffers)
        if self._last is not None and not tf.executing_eagerly():
            with tf.control_dependencies([self._last]):
                buffers = [tf.identity(b) for b in buffers]
        outputs = run(buffers)
        # A value read from every output: a control dependency on a function call's output
        # (Horovod's collectives are calls) does not wait for the call's body.
        self._last = tf.add_n([tf.reduce_sum(tf.cast(tf.reshape(o, [-1])[:1], tf.float32)) for o in outputs])
        return outputs

    def token(self):
        """A float32 scalar computed once the last collective so far is done."""
        return tf.constant(0.0) if self._last is None else tf.identity(self._last)


def all_workers_finite(flags, collectives):
    """True on every worker iff no worker's floating-point gradients hold a NaN or
    Inf, from this worker's flags (one per bucket): one float32 flag per worker,
    summed by one allreduce, issued after every bucket's collectives."""
    flag = 1.0 - tf.cast(tf.reduce_all(tf.stack(flags)), tf.float32)
    return tf.equal(collectives.allreduce([tf.reshape(flag, [1])])[0][0], 0.0)


def _undo_unless(finite, before):
    """Puts every variable back to the value it had (before: [(variable, value read
    before the step wrote it)]) unless finite: a non-finite step changes no state."""
    if not before:
        return
    tf.cond(finite, tf.no_op, lambda: tf.group([v.assign(value) for v, value in before]))


def _nan_like(t):
    return tf.fill(tf.shape(t), tf.constant(float("nan"), t.dtype))


def _dense(grad, name):
    if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
    if not grad.shape.is_fully_defined():
        raise ValueError(f"gradient {name!r} has shape {grad.shape}: tfcomp's payloads have fixed "
                         "capacity, so every gradient needs a fully defined static shape")
    return grad
