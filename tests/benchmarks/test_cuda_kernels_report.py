"""The CUDA kernel benchmark's report (benchmarks/cuda/report.py): the
numbers it prints are the ones in the JSON lines, compared the right way round.
Needs neither a GPU nor TensorFlow."""
import json

import pytest

from benchmarks.cuda import report
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def record(op, ms, n=1 << 20, dtype="float32", param=0, **extra):
    return json.dumps({"device": "Test GPU", "op": op, "dtype": dtype, "n": n, "param": param,
                       "ms": ms, "min_bytes": 4 * n, "gbps": 4 * n / (ms * 1e6), **extra})


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "kernels.jsonl"
    path.write_text("\n".join([
        "device 0: Test GPU (sm_90)",  # what the benchmark itself prints first
        record("read", 0.010),
        record("sign_pack", 0.020),
        record("sign_pack_composed", 0.080),
        record("hash_select", 0.025, param=0.01),
        # The benchmark's C printf writes -nan for the fill line's 0 / 0 throughput.
        '{"device": "Test GPU", "op": "hash_select_fill", "dtype": "float32", "n": 1048576, '
        '"param": 0.01, "ms": 0.00000, "min_bytes": 0, "gbps": -nan, "fill": 0.6320}',
        record("cub_select_if", 0.050, param=0.01),
        record("exact_topk_sort", 1.0),
    ]) + "\n")
    return path


def test_load_skips_non_json_lines_and_reads_nan(results):
    rows = report.load(results)
    assert ("read", "float32", 1 << 20, 0) in rows
    assert rows[("hash_select_fill", "float32", 1 << 20, 0.01)]["fill"] == pytest.approx(0.632)
    assert len(rows) == 7


def test_table_speed_up_is_the_other_time_over_tfcomps(results):
    rows = report.load(results)
    sign = report.table(rows, {}, "sign", {20})
    line = next(l for l in sign.splitlines() if l.startswith("| `sign_pack`"))
    assert "**4.00x**" in line          # 0.080 / 0.020
    assert "| 2.00 |" in line           # 0.020 / 0.010: twice the read floor
    select = report.table(rows, {}, "select", {20})
    cub = next(l for l in select.splitlines() if "`cub_select_if`" in l)
    sort = next(l for l in select.splitlines() if "`exact_topk_sort`" in l)
    assert "**2.00x**" in cub and "**40.00x**" in sort  # the sort has no ratio: param 0


def test_table_before_column(results, tmp_path):
    rows = report.load(results)
    before_path = tmp_path / "before.jsonl"
    before_path.write_text(record("sign_pack", 0.030) + "\n")
    line = next(l for l in report.table(rows, report.load(before_path), "sign", {20}).splitlines()
                if l.startswith("| `sign_pack`"))
    assert "0.0300 | 1.50x faster" in line


def test_main_writes_markdown_and_plots(results, tmp_path):
    from absl import flags
    flags.FLAGS(["report", f"--results={results}", f"--out_dir={tmp_path}", "--name=t",
                 "--table_sizes=20"])
    report.main([])
    md = (tmp_path / "t.md").read_text()
    assert "Test GPU" in md and "0.632" in md
    for family in report.COMPARISONS:
        assert (tmp_path / f"t_{family}.png").stat().st_size > 1000
