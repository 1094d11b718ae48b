"""Low-rank compressors: PowerSGD (Vogels et al.) and ACP-SGD (Zhang et al.).

A gradient is viewed as a matrix M of n rows and m columns (the last axis is
the columns: a conv kernel (kh, kw, in, out) is (kh*kw*in) x out) and sent as
rank-r factors P (n x r) and Q (m x r), which add up across workers, so both
go by allreduce.

PowerSGD: P = M Q (allreduce), P orthonormalised, Q = M^T P (allreduce); the
estimate is P Q^T; Q is kept for the next step (warm start).

ACP-SGD (Algorithm 2 of the paper): one factor per step, alternating. Steps
0, 2, ... orthonormalise Q_{t-1}, compute P = (M + E) Q, keep the error
E = M + E - P Q^T and allreduce P; steps 1, 3, ... do the same with P and Q
swapped. Half PowerSGD's computation and traffic per step.

Same-shape tensors are compressed together, stacked, with batched matmuls
and QR (batch_tensors_with_same_shape). Random starting factors are N(0, 1)
from a seed of the tensor name and step, so every worker draws the same. The error update E = M - P Q^T is the fused
op ops.lowrank_residual (one pass over M; 2.3x faster than the TF ops at
4096^2, rank 4: benchmarks/results/lowrank_residual_bench.md), the estimate
P Q^T that decompression hands on is ops.lowrank_product (written once), and
M = G + E with P = M Q (PowerSGD, ACP-SGD's even steps) is one pass,
ops.lowrank_compensate, and Q = M^T P another, ops.lowrank_project.

Momentum: the optimizer's, after decompression (momentum=None, as in PowerSGD's
paper). momentum="auto" takes it over as EFSignSGD and the sparsifiers do
(base.WorkerMomentum); under SGD with momentum that trained no better for
PowerSGD and worse for ACPSGD (benchmarks/results/convergence.md,
low_rank_takeover rows).
"""
import tensorflow as tf

from tfcomp import ops
from tfcomp.compressors.base import EPOCH, Collective, Compressor, Payload, PayloadSpec, Round, checked_warmup_steps
from tfcomp.compressors.momentum import WorkerMomentum

# The ranks that trained like dense after a dense epoch in tfcomp's convergence benchmark
# (ACPSGD(8) sends one rank-8 factor a step: PowerSGD(4)'s bytes; ACPSGD(4) and rank 1
# did not; benchmarks/results/convergence.md).
DEFAULT_POWERSGD_RANK = 4
DEFAULT_ACPSGD_RANK = 8


def matrix_shape(shape):
    """(rows, columns) of a tensor's matrix view: the last axis is the columns."""
    shape = tf.TensorShape(shape).as_list()
    columns = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows, columns


def project_columns(matrix, factor):
    """M^T F for M (n x m, or a batch) and F (n x r): ops.lowrank_project for one matrix (one
    pass over M); for a batch (F^T M)^T, which reads M row by row (TensorFlow's CPU matmul
    with transpose_a is 9x slower at 4096^2, rank 4: 8 against 70 ms, one thread)."""
    if matrix.shape.rank == 2:
        return ops.lowrank_project(matrix, factor)
    return tf.linalg.matrix_transpose(tf.matmul(factor, matrix, transpose_a=True))


def orthonormalize(x, epsilon=0.0):
    """Orthonormal columns spanning x's, per matrix of a batch (reduced QR; a
    normalisation for one column)."""
    if x.shape[-1] == 1:
        return x / (tf.norm(x, axis=-2, keepdims=True) + epsilon)
    return tf.linalg.qr(x)[0]


def _estimate(p, q):
    """P Q^T, written once (ops.lowrank_product; a batched matmul for stacked tensors).
    The mean over workers is taken on the thin factor, before the product: dividing the
    n x m product would be another pass over the gradient."""
    if p.shape.rank == 2:
        return ops.lowrank_product(p, q)
    return tf.matmul(p, q, transpose_b=True)


class LowRank(WorkerMomentum, Compressor):
    """Common part: rank, error feedback, the matrix view, seeded starting factors."""

    def __init__(self, matrix_approximation_rank, use_error_feedback=True, min_compression_rate=2.0,
                 orthogonalization_epsilon=0.0, batch_tensors_with_same_shape=True, momentum=None,
                 warmup_steps=EPOCH):
        if not isinstance(matrix_approximation_rank, int) or matrix_approximation_rank < 1:
            raise ValueError(f"{type(self).__name__}: matrix_approximation_rank must be an integer >= 1, "
                             f"got {matrix_approximation_rank!r}")
        if min_compression_rate < 1:
            raise ValueError(f"{type(self).__name__}: min_compression_rate must be >= 1, got "
                             f"{min_compression_rate!r}")
        self.matrix_approximation_rank = matrix_approximation_rank
        self.use_error_feedback = use_error_feedback
        self.min_compression_rate = float(min_compression_rate)
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape
        # Dense steps before compression starts (PyTorch's PowerSGD hook: start_powerSGD_iter=1000).
        self.warmup_steps = checked_warmup_steps(type(self).__name__, warmup_steps)
        self._init_momentum(momentum)

    @property
    def batches_same_shape(self):
        return self.batch_tensors_with_same_shape

    def accepts(self, shape, dtype):
        n, m = matrix_shape(shape)
        r = self.matrix_approximation_rank
        if r >= min(n, m):
            return False, f"rank {r} >= min({n}, {m}): the factors would not be smaller"
        if n * m / ((n + m) * r) < self.min_compression_rate:
            return False, f"compression rate {n * m / ((n + m) * r):.2f} < min_compression_rate"
        return True, ""

    def _factor_specs(self, shape, dtype):
        n, m = matrix_shape(shape)
        r = self.matrix_approximation_rank
        return (n, r), (m, r), tf.as_dtype(dtype)

    def state_specs(self, shape, dtype):
        p_shape, q_shape, dtype = self._factor_specs(shape, dtype)
        specs = {"p": (p_shape, dtype), "q": (q_shape, dtype)}
        if self.use_error_feedback:
            specs["residual"] = (tuple(shape), dtype)
        return {**specs, **self.momentum_state_specs(shape, dtype)}

    def _matrix(self, grad, state, ctx):
        """M (+ E with error feedback), as a matrix (a batch of them for stacked tensors)."""
        grad = self.corrected(grad, state)
        if ctx.batch:
            return tf.reshape(grad, (ctx.batch, *matrix_shape(grad.shape[1:])))
        return tf.reshape(grad, matrix_shape(grad.shape))

    def _matrix_and_product(self, grad, state, ctx, factor):
        """M (+ E with error feedback) as _matrix gives it, and M F for the factor F. With error
        feedback on one matrix, both come from one pass over the gradient and the residual
        (ops.lowrank_compensate): the add and a matmul would each read M again."""
        if "residual" not in state or ctx.batch:
            matrix = self._matrix(grad, state, ctx)
            return matrix, tf.matmul(matrix, factor)
        shape = matrix_shape(grad.shape)
        grad = tf.reshape(self.with_momentum(grad, state), shape)
        return ops.lowrank_compensate(grad, tf.reshape(state["residual"], shape), factor)

    @staticmethod
    def _residual(matrix, p, q):
        """M - P Q^T: the fused op for one matrix, a batched matmul for a batch."""
        if matrix.shape.rank == 2:
            return ops.lowrank_residual(matrix, p, q)
        return matrix - tf.matmul(p, q, transpose_b=True)

    @staticmethod
    def _kept_or_fresh(variable, fresh):
        """The factor kept from the last step, or a fresh one before any was kept."""
        return tf.cond(tf.reduce_any(tf.not_equal(variable, 0)), lambda: tf.identity(variable), fresh)

    @staticmethod
    def _random_factor(shape, dtype, ctx, salt):
        """Draws N(0, 1) per tensor, so a batch draws what its members would alone."""
        if not ctx.batch:
            return lambda: tf.cast(tf.random.stateless_normal(shape, ctx.seed(salt=salt)), dtype)
        return lambda: tf.cast(tf.stack([tf.random.stateless_normal(shape[1:], ctx.seed(salt=salt, name=m))
                                         for m in ctx.members]), dtype)


class PowerSGD(LowRank):
    """PowerSGD: two allreduce rounds per step (P, then Q), warm-started Q."""

    def __init__(self, matrix_approximation_rank=DEFAULT_POWERSGD_RANK, use_error_feedback=True, warm_start=True,
                 min_compression_rate=2.0, orthogonalization_epsilon=0.0, warmup_steps=EPOCH,
                 batch_tensors_with_same_shape=True, momentum=None):
        super().__init__(matrix_approximation_rank, use_error_feedback, min_compression_rate,
                         orthogonalization_epsilon, batch_tensors_with_same_shape, momentum, warmup_steps)
        self.warm_start = warm_start

    def payload_specs(self, shape, dtype):
        p_shape, q_shape, dtype = self._factor_specs(shape, dtype)
        return [[PayloadSpec(p_shape, dtype, Collective.ALLREDUCE)],
                [PayloadSpec(q_shape, dtype, Collective.ALLREDUCE)]]

    def compress(self, grad, state, ctx):
        fresh = self._random_factor(state["q"].shape, grad.dtype, ctx, salt=10)
        q = self._kept_or_fresh(state["q"], fresh) if self.warm_start else fresh()
        matrix, p = self._matrix_and_product(grad, state, ctx, q)

        def after_p(summed):
            p_hat = orthonormalize(summed[0], self.orthogonalization_epsilon)
            state["p"].assign(p_hat)
            return Round([Payload(project_columns(matrix, p_hat), Collective.ALLREDUCE)],
                         lambda q_summed: after_q(p_hat, q_summed[0]))

        def after_q(p_hat, q_sum):
            q_mean = q_sum / tf.cast(ctx.num_workers, q_sum.dtype)
            if self.use_error_feedback:
                state["residual"].assign(tf.reshape(self._residual(matrix, p_hat, q_mean), grad.shape))
            state["q"].assign(q_mean)
            return self.hand_off(tf.reshape(_estimate(p_hat, q_mean if ctx.average else q_sum), grad.shape), state)

        return Round([Payload(p, Collective.ALLREDUCE)], after_p)


class ACPSGD(LowRank):
    """ACP-SGD: one allreduce per step, of P on even steps and of Q on odd ones."""

    phases = 2

    def __init__(self, matrix_approximation_rank=DEFAULT_ACPSGD_RANK, use_error_feedback=True, reuse_query=True,
                 min_compression_rate=2.0, orthogonalization_epsilon=0.0, batch_tensors_with_same_shape=True,
                 momentum=None, warmup_steps=EPOCH):
        super().__init__(matrix_approximation_rank, use_error_feedback, min_compression_rate,
                         orthogonalization_epsilon, batch_tensors_with_same_shape, momentum, warmup_steps)
        self.reuse_query = reuse_query

    def payload_specs(self, shape, dtype, phase=0):
        p_shape, q_shape, dtype = self._factor_specs(shape, dtype)
        return [[PayloadSpec(p_shape if phase == 0 else q_shape, dtype, Collective.ALLREDUCE)]]

    def payload_bytes(self, shape, dtype):
        """Per step, averaged over the two phases."""
        return sum(spec.nbytes for phase in (0, 1) for spec in self.payload_specs(shape, dtype, phase)[0]) / 2

    def compress(self, grad, state, ctx):
        sent_name, query_name = ("p", "q") if ctx.phase == 0 else ("q", "p")
        query_var = state[query_name]
        fresh = self._random_factor(query_var.shape, grad.dtype, ctx, salt=20 + ctx.phase)
        query = self._kept_or_fresh(query_var, fresh) if self.reuse_query else fresh()
        query = orthonormalize(query, self.orthogonalization_epsilon)
        if ctx.phase == 0:
            matrix, sent = self._matrix_and_product(grad, state, ctx, query)  # P = (M + E) Q
            p, q = sent, query
        else:
            matrix = self._matrix(grad, state, ctx)
            sent = project_columns(matrix, query)  # Q = (M + E)^T P
            p, q = query, sent
        if self.use_error_feedback:  # E = M + E - P Q^T, with this worker's P and Q
            state["residual"].assign(tf.reshape(self._residual(matrix, p, q), grad.shape))
        query_var.assign(query)

        def finish(summed):
            total = summed[0]
            mean = total / tf.cast(ctx.num_workers, total.dtype)
            state[sent_name].assign(mean)
            factor = mean if ctx.average else total
            estimate = _estimate(factor, query) if ctx.phase == 0 else _estimate(query, factor)
            return self.hand_off(tf.reshape(estimate, grad.shape), state)

        return Round([Payload(sent, Collective.ALLREDUCE)], finish)
