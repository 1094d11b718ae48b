"""`python -m tfcomp.analysis whatif --compression_ratios`: Zhang et al.'s dense-compression
what-if from the command line (issue 41), its table, JSON and plot agreeing with the
simulator's compression_ratio. No TensorFlow."""
import io
import json
import pathlib

import numpy as np
import pytest

from tfcomp.analysis.cli import main as cli
from tfcomp.analysis.model import whatif
from tfcomp.analysis.model.profile import Profile
from tfcomp.analysis.model.simulator import simulate
from tfcomp.costs.network import Link
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SYNTHETIC = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "synthetic_resnet50_profile.json"


def run_cli(*args):
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(["tfcomp.analysis", *map(str, args)], out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def test_whatif_sweeps_compression_ratios_with_their_table_json_and_plot(tmp_path):
    status, out, err = run_cli("whatif", f"--profile={SYNTHETIC}", f"--output={tmp_path}", "--workers=4,16",
                               "--bandwidths_gbps=1,10,100", "--compressors=TopK", "--compression_ratios=10,2,100")
    assert status == 0, err
    assert "30 configurations" in out  # (dense, TopK, 3 ratios) x 2 workers x 3 bandwidths
    assert "compression_ratio.png" in out
    png = tmp_path / "compression_ratio.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    data = json.loads((tmp_path / "whatif.json").read_text())
    assert data["compression_ratios"] == [2, 10, 100]
    assert data["names"] == ["dense", "TopK", "ratio 2x", "ratio 10x", "ratio 100x"]
    assert [c["compressor"] for c in data["crossovers"]] == ["TopK", "TopK"]  # ratios never cross dense
    profile = Profile.load(SYNTHETIC)
    iteration = np.array(data["iteration_s"])
    for r, ratio in enumerate((2, 10, 100), start=2):
        for w, workers in enumerate((4, 16)):
            for b, gbps in enumerate((1, 10, 100)):
                expected = simulate(profile.model, workers, Link.from_gbit(gbps, 30e-6),
                                    allgather_link=Link.from_gbit(gbps, 40e-6), addest=profile.addest,
                                    compression_ratio=ratio).iteration_s
                assert iteration[0, r, w, b] == pytest.approx(expected, rel=1e-12)
    factors = np.array(data["scaling_factor"])
    assert np.all(np.diff(factors[0, [0, 2, 3, 4]], axis=0) >= -1e-12)  # more compression, never slower
    table = (tmp_path / "whatif.md").read_text()
    assert "## Dense compression ratios (Zhang et al.'s what-if)" in table
    assert "| Gbit/s | 1x | 2x | 10x | 100x |" in table


def test_a_sweep_without_ratios_is_as_before(tmp_path):
    status, out, err = run_cli("whatif", f"--profile={SYNTHETIC}", f"--output={tmp_path}", "--workers=4",
                               "--bandwidths_gbps=1,10", "--compressors=TopK", "--noplots")
    assert status == 0, err
    data = json.loads((tmp_path / "whatif.json").read_text())
    assert data["compression_ratios"] == [] and data["names"] == ["dense", "TopK"]
    assert "compression ratios" not in (tmp_path / "whatif.md").read_text()


def test_ratio_curves_put_dense_first_as_ratio_1():
    profile = Profile.load(SYNTHETIC)
    result = whatif.sweep(profile, [1.0], [8], [], compression_ratios=(5.0, 1.0, 2.0))
    ratios, factors = result.ratio_curves()
    assert ratios == (1.0, 2.0, 5.0)
    assert factors.shape == (1, 3, 1, 1)
    assert factors[0, 0, 0, 0] == pytest.approx(result.scaling_factor[0, 0, 0, 0])
    assert list(factors[0, :, 0, 0]) == sorted(factors[0, :, 0, 0])


@pytest.mark.parametrize("value, message", [("0", "every --compression_ratios must be a finite number > 0"),
                                            ("x", "--compression_ratios takes a comma-separated list of numbers")])
def test_bad_ratios_end_in_one_line(tmp_path, value, message):
    status, _, err = run_cli("whatif", f"--profile={SYNTHETIC}", f"--output={tmp_path}",
                             f"--compression_ratios={value}")
    assert status == 1 and message in err and err.count("\n") == 1
