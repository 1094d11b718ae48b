"""tfcomp.horovod with real `horovodrun -np 2/3` jobs (Gloo) on localhost."""
import json
import re
import time

import numpy as np
import pytest

from tests.cluster import processes
from tests.cluster.horovod_cluster import horovodrun
from tests.workers.workload import (BATCHES_PER_EPOCH, MOMENTUM_RUN, assert_compressed_after_an_epoch,
                                    assert_identical_weights, assert_trains_like_dense_with_momentum)
from tests.stacks import HOROVOD

pytestmark = HOROVOD

STEPS = 32
DENSE_BYTES = 4 * (64 * 64 + 64 + 64 * 10 + 10)


def train(tmp_path, ranks=2, env=None, **flags):
    args = [f"--{k}={v}" for k, v in flags.items()]
    code, log, results = horovodrun("tests.workers.horovod_worker", ranks, args, tmp_path, env=env)
    assert code == 0 and None not in results, f"horovodrun exited {code}:\n{log[-4000:]}"
    return results


def assert_learns(results):
    losses = results[0]["losses"]
    assert losses[-1] < 0.85 * losses[0], losses


def exchange_collectives(timeline_path):
    """[(operation, dtype, elements)] of every grouped collective in Horovod's own
    timeline: the exchange's fused buffers (startup checks are not grouped)."""
    text = timeline_path.read_text().strip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    names = {e["pid"]: e["args"].get("name", "") for e in events if e.get("name") == "process_name"}
    grouped = {pid for pid, name in names.items() if "HorovodGrouped" in name}
    ops, open_ops = [], {}
    for e in events:
        if e.get("pid") not in grouped:
            continue
        if e.get("ph") == "B" and e["name"] in ("ALLREDUCE", "ALLGATHER"):
            open_ops[e["pid"]] = e["name"]
        elif e.get("ph") == "E" and "shape" in e.get("args", {}) and e["pid"] in open_ops:
            elements = int(np.prod(json.loads(e["args"]["shape"])))
            ops.append((open_ops.pop(e["pid"]), e["args"]["dtype"], elements))
    return ops


def test_no_compression_matches_horovods_optimizer(tmp_path):
    ours = train(tmp_path / "tfcomp", compression="NoCompression")
    theirs = train(tmp_path / "horovod", engine="horovod", compression="hvd.none")
    assert_identical_weights(ours)
    for a, b in zip(ours[0]["weights"], theirs[0]["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ours[0]["losses"], theirs[0]["losses"], rtol=1e-6)
    assert ours[0]["state_step"] == STEPS
    assert ours[0]["optimizer_class"] == "SGD"  # saved models load without tfcomp


SPARSE = {"ratio": 0.05}
# Sent dense, by allreduce, with any compressor: the 1-D biases and the 64x10
# kernel (under min_compress_elements=1024). The 64x64 kernel is compressed.
DENSE_REST = 64 + 10 + 64 * 10


# What each step sends, from the first step on (warmup_steps=0 where the default is an epoch): each
# kind of payload once. TopK and DGC send what DRAGONN sends (values and indices, allgathered) and
# go through the engine as it does; tf.distribute's suite and the emulator's run them.
@pytest.mark.parametrize("compression, lr, ranks, extra, sends", [
    ("hvd.fp16", 0.2, 2, {}, "float16 allreduce"), ("SignSGD", 0.01, 2, {}, "allgather"),
    ("EFSignSGD", 0.2, 3, {}, "allgather"), ("DRAGONN:warmup_steps=0", 0.2, 3, SPARSE, "allgather"),
    ("RandomK:warmup_steps=0", 0.5, 2, SPARSE, "allreduce"),
    ("PowerSGD:warmup_steps=0", 0.2, 2, {"rank": 4}, "allreduce"),
    ("ACPSGD:warmup_steps=0", 0.2, 3, {"rank": 4}, "allreduce")])
def test_compressors_train_under_model_fit(tmp_path, compression, lr, ranks, extra, sends):
    timeline = tmp_path / "horovod_timeline.json"
    results = train(tmp_path, ranks, env={"HOROVOD_TIMELINE": str(timeline)}, compression=compression, lr=lr,
                    **extra)
    assert_identical_weights(results)
    assert_learns(results)
    if compression != "hvd.fp16":
        assert results[0]["payload_bytes"] < DENSE_BYTES
    assert results[0]["state_step"] == STEPS

    # What crossed Horovod's collectives, read from Horovod's own timeline. The file
    # Horovod leaves at exit can lack the last step's records (seen once in a CI run,
    # three ranks on two cores: 31 of 32 allgathers), so that step may be missing.
    ops = exchange_collectives(timeline)
    recorded = range(STEPS - 1, STEPS + 1)
    # The exchange's non-finite flag: one float32 per rank and step, summed.
    flag = ("ALLREDUCE", "float32", 1)
    assert ops.count(flag) in recorded, ops[:4]
    ops = [op for op in ops if op != flag]
    assert len(ops) >= STEPS - 1
    gathered = [n for kind, _, n in ops if kind == "ALLGATHER"]
    reduced = [(dtype, n) for kind, dtype, n in ops if kind == "ALLREDUCE"]
    if sends == "allgather":  # the compressed kernel's payloads
        assert len(gathered) >= STEPS - 1 and all(n < DENSE_BYTES // 4 for n in gathered), ops[:4]
        assert {n for _, n in reduced} == {DENSE_REST}, ops[:4]
    else:
        assert gathered == [], ops[:4]
        if sends == "float16 allreduce":  # the 64x64 kernel; tensors under 1024 elements go dense
            assert set(reduced) == {("float16", 64 * 64), ("float32", DENSE_REST)}, ops[:4]
        else:
            assert sum(n for _, n in reduced) < STEPS * DENSE_BYTES // 4, ops[:4]


@pytest.fixture(scope="module")
def dense_with_momentum(tmp_path_factory):
    return train(tmp_path_factory.mktemp("dense_with_momentum"), compression="NoCompression", **MOMENTUM_RUN)


@pytest.mark.parametrize("compression", ["FP16", "EFSignSGD", "DRAGONN", "PowerSGD", "ACPSGD"])
def test_each_bare_name_trains_like_dense_under_sgd_with_momentum(tmp_path, dense_with_momentum, compression):
    """compression=tfcomp.X with no arguments under SGD(momentum=0.9), with steps_per_epoch= for the
    dense epoch (Horovod never sees the dataset), within MOMENTUM_TOLERANCE of dense: each kind of
    exchange once (TopK and DGC take DRAGONN's; tf.distribute's suite trains every bare name)."""
    ours = assert_trains_like_dense_with_momentum(train, tmp_path, dense_with_momentum, compression,
                                                  {"steps_per_epoch": BATCHES_PER_EPOCH})
    assert_compressed_after_an_epoch(ours, compression)


@pytest.mark.parametrize("optimizer, compression, extra", [
    ("lamb", "DRAGONN", SPARSE), ("adamw", "PowerSGD", {"rank": 4}), ("legacy_sgd", "EFSignSGD", {})])
def test_addons_and_legacy_optimizers_with_horovods_callbacks(tmp_path, optimizer, compression, extra):
    results = train(tmp_path, optimizer=optimizer, compression=compression, horovod_callbacks=True,
                    lr=0.01 if optimizer != "legacy_sgd" else 0.2, **extra)
    assert_identical_weights(results)
    assert_learns(results)
    assert results[0]["state_step"] == STEPS


def test_frozen_variance_adam_freezes_where_compression_starts(tmp_path):
    results = train(tmp_path, optimizer="frozen_adam", compression="EFSignSGD", lr=0.01, warmup_steps=8)
    assert_identical_weights(results)
    assert_learns(results)
    assert [r["variance_steps"] for r in results] == [8, 8]


def test_backward_passes_per_step_exchanges_every_other_step(tmp_path):
    results = train(tmp_path, compression="EFSignSGD", backward_passes_per_step=2, lr=0.2)
    assert_identical_weights(results)
    assert_learns(results)
    assert results[0]["state_step"] == STEPS // 2


def test_a_rank_that_disagrees_on_the_compressor_fails_clearly(tmp_path):
    start = time.monotonic()
    code, log, results = horovodrun("tests.workers.horovod_worker", 2,
                                    ["--compression=SignSGD", "--rank1_compression=EFSignSGD"], tmp_path,
                                    timeout=120)
    assert code not in (0, -9), log[-3000:]
    assert "workers disagree on the compression" in log and "EFSignSGD" in log, log[-3000:]
    assert results == [None, None]
    assert time.monotonic() - start < 120


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """EFSignSGD trained STEPS steps without a break, where every resumed run must end:
    trained once for the tests below."""
    return train(tmp_path_factory.mktemp("uninterrupted"), compression="EFSignSGD")


def test_per_rank_backup_and_restore_resumes_every_ranks_residuals(tmp_path, uninterrupted):
    backup = tmp_path / "backup"
    code, log, _ = horovodrun("tests.workers.horovod_worker", 2, ["--compression=EFSignSGD", f"--backup_dir={backup}",
                                                          "--interrupt_at=20"], tmp_path / "interrupted")
    assert code != 0, log[-3000:]
    resumed = train(tmp_path / "resumed", compression="EFSignSGD", backup_dir=backup)
    assert_identical_weights([*resumed, uninterrupted[0]])
    assert resumed[0]["state_step"] == STEPS


KILLED_STEP = 21  # --kill_at=20: the rank dies when it starts the 21st step


def kill_one_rank(out_dir, ranks, killed, extra=()):
    """Rank `killed` SIGKILLs itself as it starts step KILLED_STEP; returns horovodrun's log."""
    # Started with `python -m`: horovodrun names the first rank to end, and a preloaded rank's end
    # reaches it through the preload server, late enough that a survivor's could come first.
    code, log, results = horovodrun("tests.workers.horovod_worker", ranks,
                                    ["--compression=EFSignSGD", "--kill_at=20", f"--kill_rank={killed}", *extra],
                                    out_dir, timeout=200, env={"TFCOMP_TEST_PRELOAD": "0"})
    assert code not in (0, -9), log[-3000:]  # horovodrun failed the job itself
    assert f"Process name: {killed}\nExit code: 137" in log, log[-3000:]
    assert results == [None] * ranks
    assert processes.running(str(out_dir)) == []  # no rank is left behind
    return log


@pytest.mark.parametrize("ranks, killed", [(2, 1), (3, 0)])
def test_a_killed_rank_is_named_with_its_step_on_every_other_rank(tmp_path, ranks, killed):
    start = time.monotonic()
    log = kill_one_rank(tmp_path, ranks, killed)
    for rank in range(ranks):
        if rank != killed:
            # each surviving rank's first report: horovodrun then ends the job, killing the others too
            first = re.search(rf"^\[{rank}\]<stderr>:.*?tfcomp: ((?:then )?rank \d+ .*)$", log, re.M)
            assert first, log[-3000:]
            # the survivor waits in the killed rank's step or still finishes the one before: the same moment
            assert re.match(rf"rank {killed} \(127\.0\.0\.1, pid \d+\) was lost (during training step "
                            rf"{KILLED_STEP}|after training step {KILLED_STEP - 1}): its process ended without "
                            rf"leaving", first.group(1)), first.group(1)
    assert time.monotonic() - start < 150


def test_backup_and_restore_resumes_after_a_rank_is_killed(tmp_path, uninterrupted):
    backup = tmp_path / "backup"
    kill_one_rank(tmp_path / "killed", 2, 1, [f"--backup_dir={backup}"])
    resumed = train(tmp_path / "resumed", compression="EFSignSGD", backup_dir=backup)
    assert_identical_weights([*resumed, uninterrupted[0]])
    assert resumed[0]["state_step"] == STEPS


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_timeline_records_every_ranks_phases(tmp_path, loop):
    """Under model.fit and in a custom loop with the tape (which this run also checks trains:
    ranks identical, loss down, the compressor's state stepped every step)."""
    from tests.callbacks.test_timeline import check_steps, read_files  # pylint: disable=import-outside-toplevel
    timeline = tmp_path / "timeline"
    results = train(tmp_path / "run", loop=loop, compression="DRAGONN:warmup_steps=0", lr=0.2, trace_dir=timeline,
                    **SPARSE)
    if loop == "custom":
        assert_identical_weights(results)
        assert_learns(results)
        assert results[0]["state_step"] == STEPS
    assert sorted(p.name for p in timeline.iterdir()) == [
        f"rank{r}.{ext}" for r in (0, 1) for ext in ("csv", "png", "trace.json")]
    for rank in (0, 1):
        doc, rows = read_files({"trace": timeline / f"rank{rank}.trace.json", "csv": timeline / f"rank{rank}.csv",
                                "png": timeline / f"rank{rank}.png"})
        steps = check_steps(doc, rows)
        assert sorted(steps) == list(range(8, 16))
        for events in steps.values():
            phases = [e["args"]["phase"] for e in events]
            assert {"forward_backward", "compress", "communicate", "decompress", "apply"} <= set(phases), phases
            kinds = sorted(e["args"]["collective"] for e in events if "collective" in e["args"])
            # the DRAGONN kernel; the non-finite flag and the dense rest
            assert kinds == ["allgather", "allreduce", "allreduce"], kinds


def test_timeline_of_horovods_own_optimizer_times_the_backward_pass(tmp_path):
    """hvd.DistributedOptimizer allreduces in compute_gradients, before apply_gradients,
    in a function call whose outputs a control dependency did not wait on. Stamped there,
    the gradients showed as ready before the backward pass ran (forward_backward 0.01 ms)
    and the allreduce's wait landed in apply. Here each step's forward-backward pass is
    about 3.7 GFLOP of convolutions: at least 5 ms on any CPU."""
    timeline = tmp_path / "timeline"
    train(tmp_path / "run", engine="horovod", compression="hvd.none", trace_dir=timeline, conv_model=True)
    steps = {}
    for event in json.loads((timeline / "rank0.trace.json").read_text())["traceEvents"]:
        if event.get("ph") == "X" and event.get("cat") == "phase":
            steps.setdefault(event["args"]["step"], {})[event["name"]] = event["dur"] / 1e3
    assert sorted(steps) == list(range(8, 16))
    for phases in steps.values():
        assert phases["forward_backward"] >= 5, phases
        assert {"aggregate", "apply"} <= set(phases), phases
