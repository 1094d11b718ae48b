"""The benchmarks' predictions (benchmarks.harness.prediction) and the compressor specs
they and the workers read (benchmarks.harness.compression_specs, through the library's
tfcomp.compressors.registry.parse_compressor)."""
import json

import pytest

from benchmarks.harness import compression_specs, prediction
from tfcomp.analysis.model import planner
from tfcomp.analysis.model.synthetic import synthetic_profile
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def test_a_saved_plan_replays_to_the_step_time_the_planner_predicted(tmp_path):
    """benchmarks.harness.prediction replays a saved plan through simulate_profile(strategy=...):
    the whole simulation agrees with the planner's incremental replay."""
    profile_path = tmp_path / "profile.json"
    profile = synthetic_profile()
    profile.save(profile_path)
    for workers in (4, 64):
        result = planner.plan(profile, workers)
        plan_path = tmp_path / f"plan-{workers}.json"
        plan_path.write_text(json.dumps(result.to_dict()))
        spec = compression_specs.for_cluster("plan:" + str(tmp_path / "plan-{workers}.json"), "synthetic", workers,
                                             "unlimited")
        assert spec == f"plan:{plan_path}"
        predicted = prediction.predicted_step_ms(profile_path, "tf.distribute", workers, spec)
        assert predicted == pytest.approx(1e3 * result.iteration_s, rel=1e-9)
    with pytest.raises(ValueError, match="may name {model}, {workers} and {link} only"):
        compression_specs.for_cluster("plan:{nodes}.json", "m", 2, "1gbit")
    assert compression_specs.for_cluster("DGC", "m", 2, "1gbit") == "DGC"


def test_a_spec_names_its_compressor_one_way_and_a_bare_name_means_the_defaults():
    canonical = compression_specs.canonical
    for spec in ("PowerSGD", "PowerSGD:rank=4", "PowerSGD:matrix_approximation_rank=4"):
        assert canonical(spec) == "PowerSGD"
    assert canonical("ACPSGD:rank=8") == "ACPSGD" and canonical("DGC:ratio=0.1") == "DGC"
    assert canonical("PowerSGD:matrix_approximation_rank=2") == "PowerSGD:rank=2"
    assert canonical("TopK:momentum=0.5:ratio=0.01") == "TopK:ratio=0.01:momentum=0.5"
    assert canonical("DGC:momentum=None:warmup_steps=0") == "DGC:momentum=None:warmup_steps=0"
    for spec in ("EFSignSGD", "FP16", "NoCompression", "auto", "plan:{model}.json", "DRAGONN:ratio=0.01"):
        assert canonical(spec) == spec
    for spec in ("PowerSGD:rank=2", "DGC:momentum=None:warmup_steps=0", "DRAGONN:ratio=0.01:bucket_size=2"):
        assert canonical(canonical(spec)) == canonical(spec)  # read back, the same compressor
    assert compression_specs.compressor("PowerSGD").matrix_approximation_rank == 4
    assert compression_specs.compressor("DGC:ratio=0.1").ratio == 0.1
    # What the library's parser refuses, the driver refuses before any worker starts.
    with pytest.raises(ValueError, match="no tfcomp compressor 'Zip'"):
        canonical("Zip")
    with pytest.raises(ValueError, match="compressor knobs are name=value"):
        canonical("DGC:0.1")
