"""benchmarks.decode_scaling's report: which cells were fitted, the prediction's error,
the line through the measured points, and the before/after comparison; fabricated
rounds (the timing itself is codec_seconds', tested in tests/analysis)."""
import json

import pytest

from benchmarks.decode_scaling import compare
from benchmarks.decode_scaling.report import FITTED, PROFILE_WORKERS, fits, line_fit, markdown, summarize
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

KS = [2, 3, 4, 8, 16]


def rounds(measured_ms, predicted_ms):
    """Two rounds whose measured and predicted seconds at K are measured_ms(K), predicted_ms(K)."""
    return [{"measured": {str(k): measured_ms(k) * f / 1e3 for k in KS},
             "predicted": {str(k): predicted_ms(k) / 1e3 for k in KS}} for f in (1.0, 1.1)]


def test_fitted_cells_are_where_the_profile_timed_decode_and_the_error_is_against_the_median():
    from tfcomp.analysis.measure import codecs  # pylint: disable=import-outside-toplevel
    assert FITTED == (PROFILE_WORKERS,) + tuple(m * PROFILE_WORKERS for m in codecs.SLOPE_WORKERS)
    rows = summarize({("m", "Sign"): rounds(lambda k: 1.0 + k, lambda k: 1.05 * (1.0 + k))}, KS)
    assert [r["workers"] for r in rows if r["fitted"]] == [k for k in KS if k in FITTED] == [2, 4, 8]
    k3 = next(r for r in rows if r["workers"] == 3)
    assert k3["measured_ms"] == pytest.approx(4.0 * 1.05)  # median of 4.0 and 4.4
    assert k3["measured_min_ms"] == pytest.approx(4.0) and k3["measured_max_ms"] == pytest.approx(4.4)
    assert k3["error"] == pytest.approx(0.0)


def test_a_line_fits_exactly_where_decode_is_linear_and_worse_where_it_bends():
    intercept, slope, r2 = line_fit(KS, [0.002 + 0.001 * k for k in KS])
    assert (intercept, slope, r2) == (pytest.approx(0.002), pytest.approx(0.001), pytest.approx(1.0))
    assert line_fit(KS, [0.001 * k * k for k in KS])[2] < 0.99
    out = fits({("m", "Sign"): rounds(lambda k: 2.0 + k, lambda k: 0.0)}, KS)
    assert out["m Sign"]["per_worker_ms"] == pytest.approx(1.05)


def test_the_report_counts_held_out_cells_and_names_the_worst():
    rows = summarize({("m", "Sign"): rounds(lambda k: 10.0, lambda k: 10.5 if k != 16 else 5.25)}, KS)
    meta = {"command": "python -m benchmarks.decode_scaling", "commit": "abc1234", "rounds": 2, "elapsed_s": 1.0,
            "load": [0.1, 0.2], "machine": {"date": "2026-11-28", "cpus": 2, "cpu": "x", "tensorflow": "2.15.1"}}
    text = markdown(rows, fits({("m", "Sign"): rounds(lambda k: 10.0, lambda k: 10.0)}, KS), meta, KS)
    assert "Held-out cells: 2; prediction within 15% of the measurement in 1" in text
    assert "worst -50.0% (m, Sign, K=16)" in text
    assert "| m | Sign | 2* |" in text and "| m | Sign | 3 |" in text


def test_compare_pools_every_round_of_each_builds_runs(tmp_path):
    for name, ms in (("b1", 4.0), ("b2", 6.0), ("a1", 2.0), ("a2", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "decode_scaling.json").write_text(json.dumps(
            {"workers": [16], "rounds": {"m Sign": [{"measured": {"16": ms / 1e3}}]}}))
    before = compare.pooled([tmp_path / "b1", tmp_path / "b2"])
    assert before[("m Sign", 16)] == [pytest.approx(4.0), pytest.approx(6.0)]
    text = compare.table(before, compare.pooled([tmp_path / "a1", tmp_path / "a2"]))
    assert "| m Sign | 16 | 5.00 [4.00-6.00] | 2.00 [2.00-2.00] | 2.50x |" in text
