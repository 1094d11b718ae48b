"""benchmarks.codec_bench: every compressor has a stated memory floor, and a cell of the
benchmark measures the codec against a streaming read of the same gradient."""
import numpy as np
import pytest
import tensorflow as tf

from benchmarks.codec_bench import floors
from benchmarks.codec_bench import cells as codec_bench
from tfcomp.compressors.registry import COMPRESSORS, parse_compressor
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_every_compressor_has_a_floor_of_at_least_one_pass(name):
    compressor = COMPRESSORS[name]()
    for dtype in (tf.float32, tf.float16):
        encode, decode = floors.floor_bytes_per_element(compressor, (1024, 1024), dtype, 2)
        # Every codec at least writes its result once.
        assert decode >= dtype.size
        assert encode >= 0


def test_decode_floors_grow_with_workers_where_payloads_are_gathered():
    for spec in ("SignSGD", "EFSignSGD", "DGC:ratio=0.1"):
        compressor = parse_compressor(spec)
        two = floors.floor_bytes_per_element(compressor, (1024, 1024), tf.float32, 2)[1]
        eight = floors.floor_bytes_per_element(compressor, (1024, 1024), tf.float32, 8)[1]
        assert eight > two, spec
    allreduced = parse_compressor("PowerSGD")
    assert (floors.floor_bytes_per_element(allreduced, (1024, 1024), tf.float32, 2)
            == floors.floor_bytes_per_element(allreduced, (1024, 1024), tf.float32, 8))


def test_a_cell_measures_the_codec_against_a_read_of_the_same_gradient():
    shape = codec_bench.shape_of(15)
    assert shape == (256, 128)
    gradient = tf.constant(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    row = codec_bench.measure("EFSignSGD", shape, tf.float32, 2, 3, gradient)
    assert row["elements"] == 2**15 and not row["sent_dense"]
    assert row["encode_ms"] > 0 and row["decode_ms"] > 0 and row["read_ms"] > 0
    assert row["codec_over_read"] == pytest.approx((row["encode_ms"] + row["decode_ms"]) / row["read_ms"])
    assert row["codec_over_floor"] == pytest.approx(row["codec_over_read"] / row["floor_reads"])
    assert "EFSignSGD" in codec_bench.markdown([row], {
        "machine": {"date": "d", "cpu": "c", "cpus": 2, "tensorflow": tf.__version__}, "command": "x",
        "bfc_allocator": "true",
        "commit": "c", "load_before": "0", "load_after": "0"})
