"""`python -m tfcomp.analysis`: predict agrees with simulate_profile, whatif's table,
JSON and plots agree with its sweep and its crossovers with the cost model, and
user mistakes end in one line. No TensorFlow: a few seconds, mostly the plots."""
import dataclasses
import io
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tfcomp.analysis.cli import main as cli
from tfcomp.analysis.model.links import links
from tfcomp.costs import network as costs
from tfcomp.costs.network import ALLREDUCE, Link, Transfer
from tfcomp.analysis.model.fusion_policies import CycleFusion
from tfcomp.analysis.cli.predict import predict
from tfcomp.analysis.model.profile import CompressorProfile, GradientProfile, ModelProfile, Profile
from tfcomp.analysis.model.simulator import simulate_profile
from tfcomp.analysis.model.synthetic import synthetic_profile
from tfcomp.costs.tables import SizeTable
from tfcomp.analysis.model import whatif as whatif_model
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

REPO = pathlib.Path(__file__).resolve().parents[2]
SYNTHETIC = REPO / "tests" / "data" / "synthetic_resnet50_profile.json"
GRADIENT_BYTES = 1e8
CODEC_S = 0.02  # the fixed-cost compressor's encode plus decode


def run_cli(*args):
    """(exit status, stdout, stderr) of `python -m tfcomp.analysis args`, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(["tfcomp.analysis", *map(str, args)], out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def run_python(*args):
    """`python args` in a fresh process that imports this checkout's tfcomp."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, check=False, env=env)


def run_module(*args):
    return run_python("-m", "tfcomp.analysis", *args)


def fixed_cost_profile():
    """One 100 MB gradient ready as the backward pass ends (nothing overlaps), latency-free
    links, no vector-add cost, and a compressor sending 4 bytes for a fixed CODEC_S of
    encode and decode: compression pays while the dense allreduce costs more than that."""
    model = ModelProfile("one", forward_s=0.03, backward_s=0.1, apply_s=0.002,
                         gradients=[GradientProfile("w", GRADIENT_BYTES, 0.1)])
    constant = lambda s: SizeTable([(1, s), (1e12, s)])  # noqa: E731
    fixed = CompressorProfile("Fixed", constant(0.6 * CODEC_S), constant(0.4 * CODEC_S),
                              {"w": (Transfer(ALLREDUCE, 4),)})
    return Profile(model, allreduce=Link(0.0, 1.25e9), allgather=Link(0.0, 1.25e9), addest=SizeTable.zero(),
                   compressors={"Fixed": fixed})


def analytic_crossover_gbps(workers):
    """Where ring_allreduce(100 MB) = CODEC_S + ring_allreduce(4 bytes): 2 (n - 4)(p - 1) / (p BW) = CODEC_S."""
    bytes_per_s = 2 * (GRADIENT_BYTES - 4) * (workers - 1) / (workers * CODEC_S)
    return bytes_per_s * 8 / 1e9


@pytest.fixture(name="fixed_profile_path")
def fixture_fixed_profile_path(tmp_path):
    path = tmp_path / "fixed.json"
    fixed_cost_profile().save(path)
    return path


# --- predict ---

@pytest.mark.parametrize("extra, link, allgather_link, fusion", [
    ([], None, None, None),
    (["--bandwidth_gbps=25", "--latency_us=10"], Link.from_gbit(25, 10e-6), Link.from_gbit(25, 10e-6), None),
    (["--bandwidth_gbps=2", "--fusion=horovod", "--bucket_bytes=8e6", "--cycle_ms=2"],
     Link(30e-6, 2.5e8), Link(40e-6, 2.5e8), CycleFusion(0.002, 8e6)),
], ids=["measured-links", "bandwidth-and-latency", "horovod-fusion"])
def test_predict_json_is_simulate_profile(extra, link, allgather_link, fusion):
    status, out, err = run_cli("predict", f"--profile={SYNTHETIC}", "--workers=16", "--compressors=PowerSGD,TopK",
                               "--json", *extra)
    assert status == 0, err
    printed = json.loads(out)
    profile = Profile.load(SYNTHETIC)
    options = {"fusion": fusion} if fusion else {}
    expected = {name: simulate_profile(profile, 16, compressor=None if name == "dense" else name, link=link,
                                       allgather_link=allgather_link, **options)
                for name in ("dense", "PowerSGD", "TopK")}
    assert list(printed["results"]) == list(expected)
    for name, result in expected.items():
        got = dict(printed["results"][name])
        speedup = got.pop("speedup_over_dense")
        assert got == pytest.approx(dataclasses.asdict(result), rel=1e-12)
        assert speedup == pytest.approx(expected["dense"].iteration_s / result.iteration_s, rel=1e-12)
        # the same link and compute: the speed-up is also the ratio of the scaling factors
        assert speedup == pytest.approx(result.scaling_factor / expected["dense"].scaling_factor, rel=1e-12)
    assert printed["workers"] == 16 and printed["model"] == "synthetic_resnet50"


def test_predict_table_shows_the_breakdown_and_the_speedups():
    status, out, err = run_cli("predict", f"--profile={SYNTHETIC}", "--workers=8", "--compressors=SignSGD",
                               "--bandwidth_gbps=1")
    assert status == 0, err
    results = {name: simulate_profile(Profile.load(SYNTHETIC), 8, compressor=c, link=Link.from_gbit(1, 30e-6),
                                      allgather_link=Link.from_gbit(1, 40e-6))
               for name, c in (("dense", None), ("SignSGD", "SignSGD"))}
    rows = {line[:26].strip(): line[26:].split() for line in out.splitlines()[5:17]}
    assert out.splitlines()[4].split() == ["dense", "SignSGD"]
    for label in ("forward", "backward", "apply", "exposed communication", "encode (ms, total)",
                  "transfer (ms, total)", "vector adds (ms, total)", "decode (ms, total)"):
        assert label in rows
    assert [float(x) for x in rows["step time (ms)"]] == pytest.approx(
        [r.iteration_s * 1e3 for r in results.values()], abs=0.006)
    assert [float(x) for x in rows["scaling factor"]] == pytest.approx(
        [r.scaling_factor for r in results.values()], abs=6e-4)
    speedup = results["dense"].iteration_s / results["SignSGD"].iteration_s
    assert float(rows["speed-up over dense"][1]) == pytest.approx(speedup, abs=6e-4)
    assert speedup > 1  # 1 Gbit/s: a 32x smaller payload pays


# --- whatif ---

def test_whatif_writes_the_table_json_and_plots_of_its_sweep(tmp_path):
    status, out, err = run_cli("whatif", f"--profile={SYNTHETIC}", f"--output={tmp_path}",
                               "--bandwidths_gbps=100,0.1,1,3,10,30", "--workers=8,2", "--compressors=TopK,PowerSGD",
                               "--compute_speedups=1,2")
    assert status == 0, err
    assert "72 configurations" in out  # 2 compute speed-ups x 3 x 2 workers x 6
    for name in ("scaling_factor_compute1x", "speedup_compute1x", "scaling_factor_compute2x", "speedup_compute2x"):
        png = tmp_path / f"{name}.png"
        assert png.stat().st_size > 10_000
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "whatif.md").read_text()
    assert "| 2x | PowerSGD |" in table and "## 8 workers, compute speed-up 2x" in table
    data = json.loads((tmp_path / "whatif.json").read_text())
    assert data["bandwidths_gbps"] == [0.1, 1, 3, 10, 30, 100] and data["workers"] == [2, 8]
    assert data["names"] == ["dense", "TopK", "PowerSGD"]
    iteration = np.array(data["iteration_s"])
    assert iteration.shape == (2, 3, 2, 6)
    profile = Profile.load(SYNTHETIC)
    for s, speedup in enumerate((1, 2)):
        scaled = whatif_model.faster_compute(profile, speedup)
        for c, name in enumerate(data["names"]):
            result = simulate_profile(scaled, 8, compressor=None if name == "dense" else name,
                                      link=Link.from_gbit(3, 30e-6), allgather_link=Link.from_gbit(3, 40e-6))
            assert iteration[s, c, 1, 2] == pytest.approx(result.iteration_s, rel=1e-12)
    speedups = np.array(data["speedup_over_dense"])
    assert speedups == pytest.approx(iteration[:, :1] / iteration)
    assert np.array(data["scaling_factor"])[1] == pytest.approx(profile.model.single_step_s / 2 / iteration[1])


def test_faster_compute_divides_compute_and_codec_not_links_or_vector_adds():
    profile = synthetic_profile()
    fast = whatif_model.faster_compute(profile, 4)
    assert fast.model.single_step_s == pytest.approx(profile.model.single_step_s / 4)
    assert [g.ready_s for g in fast.model.gradients] == pytest.approx([g.ready_s / 4 for g in profile.model.gradients])
    assert fast.compressors["TopK"].encode(1e6) == pytest.approx(profile.compressors["TopK"].encode(1e6) / 4)
    assert fast.compressors["TopK"].decode(1e6) == pytest.approx(profile.compressors["TopK"].decode(1e6) / 4)
    assert fast.allreduce == profile.allreduce and fast.addest(1e6) == profile.addest(1e6)
    assert whatif_model.faster_compute(profile, 1) is profile
    scanned = dataclasses.replace(profile, finite_scan=SizeTable([(1e4, 1e-5), (1e7, 4e-3)]))
    assert whatif_model.faster_compute(scanned, 4).finite_scan(1e6) == pytest.approx(scanned.finite_scan(1e6) / 4)


def test_whatif_and_predict_add_the_finite_check_to_compressed_steps_only():
    profile = dataclasses.replace(synthetic_profile(), finite_scan=SizeTable([(1e4, 1e-4), (1e7, 4e-3)]))
    plain = whatif_model.sweep(synthetic_profile(), [1.0, 10.0], [2, 8], ["TopK"])
    checked = whatif_model.sweep(profile, [1.0, 10.0], [2, 8], ["TopK"])
    assert np.array_equal(checked.iteration_s[:, 0], plain.iteration_s[:, 0])  # dense: the engine's own allreduce
    assert np.all(checked.iteration_s[:, 1] > plain.iteration_s[:, 1])
    link, gather = links(profile, 1.0)
    expected = simulate_profile(profile, 8, compressor="TopK", link=link, allgather_link=gather,
                                finite_check=True).iteration_s
    assert checked.iteration_s[0, 1, 1, 0] == pytest.approx(expected, rel=1e-12)
    results = predict(profile, 8, ["TopK"])
    assert results["dense"] == predict(synthetic_profile(), 8)["dense"]
    assert results["TopK"].iteration_s > predict(synthetic_profile(), 8, ["TopK"])["TopK"].iteration_s


def test_whatif_crossover_is_where_the_cost_model_says(fixed_profile_path, tmp_path):
    """The listed crossover brackets the sweep's own crossing of 1 and lies within
    interpolation error of the analytic one (dense allreduce time saved = CODEC_S)."""
    status, out, err = run_cli("whatif", f"--profile={fixed_profile_path}", f"--output={tmp_path}", "--workers=2,4",
                               "--noplots")
    assert status == 0, err
    assert not list(tmp_path.glob("*.png"))
    data = json.loads((tmp_path / "whatif.json").read_text())
    bandwidths = np.array(data["bandwidths_gbps"])
    assert bandwidths[0] == pytest.approx(0.1) and bandwidths[-1] == pytest.approx(100) and len(bandwidths) == 31
    grid_step = math.log(bandwidths[1] / bandwidths[0])
    table = (tmp_path / "whatif.md").read_text()
    for w, workers in enumerate((2, 4)):
        (entry,) = [e for e in data["crossovers"] if e["workers"] == workers]
        (listed,), (side,) = entry["gbps"], entry["faster"]
        assert side == "below"
        speedup = np.array(data["speedup_over_dense"])[0, 1, w]
        i = int(np.flatnonzero(speedup > 1)[-1])
        assert np.all(speedup[i + 1:] < 1)
        assert bandwidths[i] < listed < bandwidths[i + 1]
        analytic = analytic_crossover_gbps(workers)
        assert abs(math.log(listed / analytic)) < grid_step
        assert listed == pytest.approx(analytic, rel=0.01)
        assert f"{listed:.3g} (faster below)" in table
        assert f"{workers} workers, Fixed: crossover {listed:.3g} (faster below)" in out
    # exactly at the analytic crossover the step times agree
    p, bandwidth = 4, Link.from_gbit(analytic_crossover_gbps(4))
    profile = fixed_cost_profile()
    dense = simulate_profile(profile, p, link=bandwidth).iteration_s
    assert simulate_profile(profile, p, compressor="Fixed", link=bandwidth).iteration_s == pytest.approx(dense)
    assert dense - profile.model.single_step_s == pytest.approx(costs.ring_allreduce(GRADIENT_BYTES, p, bandwidth))


@pytest.mark.parametrize("speedup, expected", [
    ([2.0, 1.5, 0.5, 0.25], [(math.sqrt(10 * 100), "below")]),  # 1.5 -> 0.5 halfway in log between 10 and 100
    ([0.5, 1.0, 1.0, 1.5], [(math.sqrt(1 * 1000), "above")]),  # ties with dense are skipped
    ([1.5, 0.5, 1.5, 2.0], [(math.sqrt(1 * 10), "below"), (math.sqrt(10 * 100), "above")]),
    ([2.0, 1.5, 1.2, 1.0], []),
])
def test_crossovers_interpolate_in_log_bandwidth(speedup, expected):
    found = whatif_model.crossovers([1, 10, 100, 1000], speedup)
    assert [side for _, side in found] == [side for _, side in expected]
    assert [gbps for gbps, _ in found] == pytest.approx([gbps for gbps, _ in expected])


def test_a_sweep_of_a_thousand_configurations_is_cheap():
    """Timing is the benchmark's (benchmarks/analysis_speed/); this only guards against
    a sweep gone quadratic: 1,000 configurations of the 161-gradient profile."""
    profile = synthetic_profile()
    bandwidths = list(np.logspace(-1, 2, 25))
    result = whatif_model.sweep(profile, bandwidths, [2, 4, 8, 16, 32, 64, 128, 256], ["FP16", "PowerSGD", "TopK",
                                                                                 "SignSGD"])
    assert result.configurations == 1000
    assert np.all((result.scaling_factor > 0) & (result.scaling_factor <= 1))


# --- errors, help, the files ---

def _write_json(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("args, message", [
    (["predict", "--profile={missing}", "--workers=4"], "cannot read profile .*missing.json: No such file"),
    (["predict", "--profile={other_format}", "--workers=4"], "not a tfcomp analysis profile"),
    (["predict", "--profile={version_2}", "--workers=4"], "profile version 2 is not supported"),
    (["predict", "--profile={synthetic}", "--workers=4", "--compressors=PowerSGD,DGC"],
     "no compressor 'DGC' .it has: FP16, PowerSGD, SignSGD, TopK."),
    (["whatif", "--profile={synthetic}", "--compressors=ACPSGD", "--output={tmp}"], "no compressor 'ACPSGD'"),
    (["predict", "--profile={synthetic}", "--workers=4", "--bandwidth_gbps=0"], "--bandwidth_gbps must be .* > 0"),
    (["predict", "--profile={synthetic}", "--workers=4", "--bandwidth_gbps=-3"], "--bandwidth_gbps must be .* > 0"),
    (["predict", "--profile={synthetic}", "--workers=4", "--latency_us=-1"], "--latency_us must be .* >= 0"),
    (["predict", "--profile={synthetic}", "--workers=0"], "--workers must be an integer >= 1, got 0"),
    (["predict", "--profile={synthetic}"], "--workers must be an integer >= 1, got None"),
    (["predict", "--workers=4"], "--profile is required"),
    (["predict", "--profile={synthetic}", "--workers=four"], "flag --workers=four"),
    (["predict", "--profile={synthetic}", "--workers=4", "--fusion=ring"], "flag --fusion=ring"),
    (["predict", "--profile={synthetic}", "--workers=4", "--bucket_bytes=0"], "--bucket_bytes must be .* > 0"),
    (["predict", "--profile={synthetic}", "--workers=4", "--bogus=1"], "Unknown command line flag 'bogus'"),
    (["predict", "--profile={synthetic}", "--workers=4", "stray"], "unexpected arguments stray"),
    (["whatif", "--profile={synthetic}", "--bandwidths_gbps=1,-5"], "every --bandwidths_gbps must be .* > 0, got -5"),
    (["whatif", "--profile={synthetic}", "--bandwidths_gbps=1,fast"], "--bandwidths_gbps takes .* numbers, got 'fast'"),
    (["whatif", "--profile={synthetic}", "--workers=2,0"], "every --workers must be an integer >= 1, got 0"),
    (["whatif", "--profile={synthetic}", "--compute_speedups=0"], "every --compute_speedups must be .* > 0"),
    (["simulate"], "unknown subcommand 'simulate'; choose from profile, predict, whatif"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_user_errors_end_in_one_line_and_a_nonzero_status(tmp_path, args, message):
    paths = {"missing": tmp_path / "missing.json", "synthetic": SYNTHETIC, "tmp": tmp_path / "out",
             "other_format": _write_json(tmp_path / "other.json", {"format": "keras.history", "version": 1}),
             "version_2": _write_json(tmp_path / "v2.json", {**synthetic_profile().to_dict(), "version": 2})}
    status, out, err = run_cli(*(a.format(**paths) for a in args))
    assert status == 1 and not out
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("python -m tfcomp.analysis")
    assert "error: " in err
    assert re.search(message, err), err


def test_a_user_error_exits_without_a_traceback(tmp_path):
    done = run_module("predict", f"--profile={tmp_path / 'nowhere.json'}", "--workers=4")
    assert done.returncode == 1
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"python -m tfcomp.analysis predict: error: cannot read profile "
                                   f"{tmp_path / 'nowhere.json'}: No such file or directory")


def test_help_mentions_every_flag():
    done = run_module("--help")
    assert done.returncode == 0, done.stderr
    for subcommand in cli.SUBCOMMANDS:
        names = list(cli.flag_values(subcommand))
        assert len(names) >= 8
        own = run_cli(subcommand, "--help")
        assert own[0] == 0 and own[1].startswith(f"usage: python -m tfcomp.analysis {subcommand}")
        for name in names:
            flag = cli.flag_values(subcommand)[name]
            usage = f"--[no]{name}:" if flag.boolean else f"--{name}:"
            assert usage in own[1], (subcommand, name)
            assert usage in done.stdout, name
    assert run_cli()[0] == 1  # no subcommand: the usage, on stderr


def test_the_committed_synthetic_profile_is_synthetic_profile():
    assert Profile.load(SYNTHETIC).to_dict() == synthetic_profile().to_dict()
    assert "synthetic" in Profile.load(SYNTHETIC).model.name
    assert "not measured" in (SYNTHETIC.parent / "README.md").read_text()


def test_the_command_line_runs_without_tensorflow(tmp_path):
    code = ("import sys\n"
            "from tfcomp.analysis.cli import main as cli\n"
            f"assert cli.main(['x', 'whatif', '--profile={SYNTHETIC}', '--output={tmp_path}', '--workers=2',\n"
            "                  '--bandwidths_gbps=1,10', '--compressors=TopK']) == 0\n"
            "assert 'matplotlib' in sys.modules\n"
            "assert 'tensorflow' not in sys.modules, 'the command line imported TensorFlow'\n")
    done = run_python("-c", code)
    assert done.returncode == 0, done.stderr


def test_predict_imports_neither_numpy_nor_absl_app(tmp_path):
    """What keeps `python -m tfcomp.analysis predict` under 100 ms as a fresh process on the
    2-core session machine (numpy's import alone took about 60 ms there, absl.app's 20 ms)."""
    missing = tmp_path / "missing.json"
    code = ("import sys\n"
            "from tfcomp.analysis.cli import main as cli\n"
            f"assert cli.main(['x', 'predict', '--profile={SYNTHETIC}', '--workers=8', '--compressors=TopK']) == 0\n"
            f"assert cli.main(['x', 'predict', '--profile={missing}', '--workers=8']) == 1\n"
            "loaded = [m for m in ('numpy', 'absl.app', 'matplotlib', 'tensorflow') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    done = run_python("-c", code)
    assert done.returncode == 0, done.stderr


def _with_settings_in_names(profile, **renames):
    """profile with its compressors renamed as benchmarks.e2e names them ('PowerSGD:rank=4')."""
    compressors = {renames.get(k, k): dataclasses.replace(c, name=renames.get(k, k)) for k, c in profile.compressors.items()}
    return dataclasses.replace(profile, compressors=compressors)


def test_a_compressor_named_without_its_settings_is_its_one_measured_variant(tmp_path):
    path = tmp_path / "profile.json"
    profile = _with_settings_in_names(synthetic_profile(), PowerSGD="PowerSGD:rank=4", TopK="TopK:ratio=0.01")
    profile.save(path)
    bare = run_cli("predict", f"--profile={path}", "--workers=8", "--compressors=PowerSGD,TopK", "--json")
    full = run_cli("predict", f"--profile={path}", "--workers=8", "--compressors=PowerSGD:rank=4,TopK:ratio=0.01",
                   "--json")
    assert bare[0] == 0 and bare == full
    assert set(json.loads(bare[1])["results"]) == {"dense", "PowerSGD:rank=4", "TopK:ratio=0.01"}
    twice = run_cli("predict", f"--profile={path}", "--workers=8", "--compressors=PowerSGD,PowerSGD:rank=4")
    assert twice[0] == 1 and "named twice" in twice[2]


def test_a_bare_name_with_two_measured_variants_is_an_error_listing_them(tmp_path):
    path = tmp_path / "profile.json"
    profile = synthetic_profile()
    profile = dataclasses.replace(profile, compressors={
        **profile.compressors, "PowerSGD:rank=4": dataclasses.replace(profile.compressors["PowerSGD"], name="PowerSGD:rank=4"),
        "PowerSGD:rank=8": dataclasses.replace(profile.compressors["PowerSGD"], name="PowerSGD:rank=8")})
    del profile.compressors["PowerSGD"]
    profile.save(path)
    status, out, err = run_cli("predict", f"--profile={path}", "--workers=8", "--compressors=PowerSGD")
    assert status == 1 and not out
    assert "has no compressor 'PowerSGD'" in err and "PowerSGD:rank=4, PowerSGD:rank=8" in err
