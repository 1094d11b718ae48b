"""A model profile from a Timeline trace: forward, backward and apply per step, each
gradient's ready time from the backward pass's start, medians over the steps."""
import gzip
import json

import pytest

from tfcomp.analysis.measure import from_timeline
from tfcomp.callbacks import trace
from tfcomp.callbacks.segments import Segment, StepRecord
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def _step(step, t0, forward, backward, apply, ready_offsets, sizes):
    """A recorded step starting at t0: input 1 ms, forward_backward, communicate 5 ms, apply."""
    fb_start = t0 + 0.001
    first = fb_start + forward
    fb_end = first + backward
    segments = [Segment("input", "input", t0, fb_start), Segment("forward_backward", "forward_backward", fb_start, fb_end),
                Segment("communicate", "aggregate", fb_end, fb_end + 0.005),
                Segment("apply", "apply", fb_end + 0.005, fb_end + 0.005 + apply)]
    tensors = [{"name": name, "shape": [n // 4], "dtype": "float32", "bytes": n, "ready": first + off, "order": i}
               for i, ((name, n), off) in enumerate(zip(sizes, ready_offsets))]
    return StepRecord(step, segments, tensors)


SIZES = [("dense_1/kernel", 4096), ("dense_1/bias", 64), ("dense/kernel", 1 << 20)]


def _document(records):
    return json.loads(json.dumps(trace.document(records, 0, "worker0")))


def _end(record):
    return record.segments[-1].end


def test_phases_and_ready_times_are_medians_over_the_steps():
    # Consecutive steps 2 ms apart; the third one disturbed.
    first = _step(10, 100.0, 0.010, 0.020, 0.003, [0.0, 0.001, 0.019], SIZES)
    second = _step(11, _end(first) + 0.002, 0.012, 0.024, 0.004, [0.0, 0.002, 0.021], SIZES)
    third = _step(12, _end(second) + 0.002, 0.500, 0.900, 0.100, [0.0, 0.003, 0.800], SIZES)
    profile = from_timeline.model_profile(_document([first, second, third]), name="mlp")
    assert profile.name == "mlp"
    # Forward: to the first gradient, plus the 1 ms input phase and the 2 ms between steps.
    assert profile.forward_s == pytest.approx(0.012 + 0.001 + 0.002, abs=1e-6)
    assert profile.backward_s == pytest.approx(0.024, abs=1e-6)
    assert profile.apply_s == pytest.approx(0.004, abs=1e-6)
    assert [g.name for g in profile.gradients] == ["dense_1/kernel", "dense_1/bias", "dense/kernel"]
    assert [g.nbytes for g in profile.gradients] == [4096, 64, 1 << 20]
    assert [g.ready_s for g in profile.gradients] == pytest.approx([0.0, 0.002, 0.021], abs=1e-6)


def test_a_file_is_read_and_bad_traces_are_refused(tmp_path):
    path = tmp_path / "worker0.trace.json"
    trace.write(path, [_step(3, 5.0, 0.01, 0.02, 0.001, [0.0, 0.01, 0.02], SIZES)], 0, "worker0")
    assert from_timeline.model_profile(path).total_bytes == 4096 + 64 + (1 << 20)
    zipped = tmp_path / "worker0.trace.json.gz"
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    assert from_timeline.model_profile(zipped) == from_timeline.model_profile(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not a Timeline trace"):
        from_timeline.model_profile(path)
    zipped.write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="worker0.trace.json.gz: not a Timeline trace"):
        from_timeline.model_profile(zipped)
    with pytest.raises(ValueError, match="no traceEvents"):
        from_timeline.model_profile({"events": []})
    with pytest.raises(ValueError, match="no step with a forward-backward phase"):
        from_timeline.model_profile(_document([StepRecord(1, [Segment("input", "input", 1.0, 2.0)], [])]))
    mixed = [_step(1, 1.0, 0.01, 0.02, 0.001, [0.0, 0.01, 0.02], SIZES),
             _step(2, 2.0, 0.01, 0.02, 0.001, [0.0, 0.01], SIZES[:2])]
    with pytest.raises(ValueError, match="different gradients"):
        from_timeline.model_profile(_document(mixed))
