"""The dense start the sparsifiers and the low-rank compressors ask for by default: one
epoch, as long as the engine learns an epoch to be (steps_per_epoch given, else the
training data's length), else UNKNOWN_EPOCH_STEPS; fixed from the first trace on."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.distribute.strategy import steps_per_epoch
from tfcomp.engines.engine import Engine
from tfcomp.exchange import step as exchange_step
from tfcomp.exchange.step import Exchange
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SHAPE = (64, 32)


def grads(k, step):
    rng = np.random.default_rng(step)
    return [[tf.constant(rng.standard_normal(SHAPE), tf.float32)] for _ in range(k)]


def test_an_epoch_is_given_else_learned_else_the_documented_length():
    exchange = Exchange(tfcomp.DGC)
    assert exchange.asks_for_an_epoch and exchange.warmup_steps == exchange_step.UNKNOWN_EPOCH_STEPS == 1000
    exchange.learn_steps_per_epoch(22)
    assert exchange.warmup_steps == 22 and exchange.epoch_steps == (22, "one epoch of the training data")
    given = Exchange(tfcomp.PowerSGD, steps_per_epoch=40)
    assert given.warmup_steps == 40 and not given.asks_for_an_epoch
    given.learn_steps_per_epoch(22)
    assert given.warmup_steps == 40  # the user's word stands
    # The most that anyone asks for: the option, or a compressor's own.
    assert Exchange(tfcomp.ACPSGD, warmup_steps=50, steps_per_epoch=40).warmup_steps == 50
    assert Exchange(tfcomp.TopK(warmup_steps=3), warmup_steps=0).warmup_steps == 3
    assert Exchange(tfcomp.EFSignSGD).warmup_steps == 0 and not Exchange(tfcomp.FP16).asks_for_an_epoch
    plan = tfcomp.Plan({"a*": tfcomp.DGC(warmup_steps=5)}, default=tfcomp.PowerSGD(warmup_steps=9))
    assert Exchange(plan).warmup_steps == 9


def test_under_auto_only_the_exchange_option_applies():
    assert Exchange(tfcomp.Auto()).warmup_steps == 0  # Auto's dense profiling is its dense start
    assert Exchange(tfcomp.Auto(), warmup_steps=12).warmup_steps == 12


def test_the_warmup_is_fixed_once_the_step_is_traced_and_runs_dense_then_compressed():
    emu = Emulator(2, tfcomp.TopK(0.1), min_compress_elements=1, check_finite=False, selection=False)
    emu.exchange.learn_steps_per_epoch(3)
    for step in range(5):
        g = grads(2, step)
        out = emu.step(g, ["w"])[0][0].numpy()
        dense = np.mean([w[0].numpy() for w in g], axis=0)
        if step < 3:
            np.testing.assert_allclose(out, dense, rtol=1e-6)
        else:
            assert np.count_nonzero(out) <= 2 * int(np.ceil(0.1 * out.size))
        emu.exchange.learn_steps_per_epoch(100)  # after the first trace: ignored
    assert emu.exchange.warmup_steps == 3
    dense_bytes, sent = 4 * SHAPE[0] * SHAPE[1], [b for _, b in emu.traffic]
    assert sum(sent[:3]) == 3 * dense_bytes and all(b < dense_bytes / 2 for b in sent[3:])


def test_the_first_trace_says_how_long_the_dense_start_is(caplog):
    emu = Emulator(2, tfcomp.PowerSGD, min_compress_elements=1)
    with caplog.at_level("WARNING"):
        emu.step(grads(2, 0), ["w"])
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "the first 1000 steps send every gradient dense" in said and "pass steps_per_epoch=" in said


def test_one_pass_over_the_data_is_the_datasets_length_or_what_it_repeats():
    batches = tf.data.Dataset.range(100).shuffle(100).batch(8)  # 13 batches
    assert steps_per_epoch(batches) == 13
    assert steps_per_epoch(batches.repeat()) == 13  # model.fit(batches.repeat(), steps_per_epoch=...)
    assert steps_per_epoch(batches.repeat().map(lambda x: x).prefetch(2)) == 13
    assert steps_per_epoch(batches.repeat(3)) == 39  # finite: Keras' epoch is all of it
    assert steps_per_epoch(batches.filter(lambda x: True)) is None  # unknown
    assert steps_per_epoch(tf.data.Dataset.range(5).repeat().batch(2)) is None  # batched after repeating
    assert steps_per_epoch(object()) is None


class _Workers(Engine):
    """An engine whose workers said `said` when gathered."""

    def __init__(self, exchange, said):
        super().__init__(exchange, rank=0, num_workers=len(said))
        self.said = said

    def gather_ints(self, values):
        return [[s] for s in self.said]

    def mean_floats(self, values):
        return values

    def peer_identity(self):
        return [0]

    def describe_peer(self, identity):
        return "worker 0", "localhost:0", "localhost"


def test_every_worker_must_learn_the_same_epoch():
    agreeing = _Workers(Exchange(tfcomp.DGC), said=[22, 22])
    agreeing.learn_steps_per_epoch(22)
    assert agreeing.exchange.warmup_steps == 22
    disagreeing = _Workers(Exchange(tfcomp.DGC), said=[22, -1])
    with pytest.raises(ValueError, match=r"differ in steps per epoch \(task order: 22, not known\)"):
        disagreeing.learn_steps_per_epoch(22)
    asked_nothing = _Workers(Exchange(tfcomp.FP16), said=[1, 2])  # nothing gathered: no epoch asked for
    asked_nothing.learn_steps_per_epoch(5)
