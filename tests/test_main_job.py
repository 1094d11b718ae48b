"""The main job's command, shortened: both engines print the side-by-side table."""
import subprocess
import sys

import pytest

from tfcomp.testing.local_cluster import ROOT


@pytest.mark.parametrize("engine", ["tf.distribute", "horovod"])
def test_main_job_prints_the_comparison(tmp_path, engine):
    # Tensor selection plans for a 1 Gbit/s link: compressing the 512x512 kernel then saves about
    # 8 ms a step against about 1 ms of compression, a margin no busy moment of a shared machine
    # erases (at the default 4 Gbit/s it is 2.1 ms against 1 ms).
    out = subprocess.run([sys.executable, "-m", "benchmarks.main_job", f"--engine={engine}", "--epochs=2",
                          "--compressors=none,DRAGONN", "--loopback_gbps=1",
                          f"--timeline={tmp_path / 'timelines'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("compression"))
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 3]}
    assert set(rows) == {"none", "DRAGONN"}
    dense, compressed = (int(rows[name][3].replace(",", "")) for name in ("none", "DRAGONN"))
    assert compressed < dense / 4  # DRAGONN at 1% sends values and indices of the large kernels
    word = "rank" if engine == "horovod" else "worker"
    for name in ("none", "DRAGONN"):
        files = sorted(p.name for p in (tmp_path / "timelines" / name).iterdir())
        assert files == [f"{word}{r}.{ext}" for r in (0, 1) for ext in ("csv", "png", "trace.json")]
