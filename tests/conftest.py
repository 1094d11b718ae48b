import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Workers on localhost start from an interpreter that imported TensorFlow once
# (tests.cluster.preload); TFCOMP_TEST_PRELOAD=0 starts each with `python -m`.
os.environ.setdefault("TFCOMP_TEST_PRELOAD", "1")
# Compression profiles (tfcomp.exchange.selection) measured by the tests stay with the tests;
# worker processes inherit the variable. Each pytest-xdist worker has its own, as a
# single pytest process would.
if os.environ.get("PYTEST_XDIST_WORKER") or "TFCOMP_CACHE_DIR" not in os.environ:
    os.environ["TFCOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfcomp-test-cache-")

# Hypothesis (tests/ops/test_properties.py): "ci", the default, runs a bounded number of
# examples drawn from a seed fixed per test, so every run tests the same inputs and the
# file takes well under a minute; `pytest --hypothesis-profile=thorough` draws 20 times
# as many, afresh each run, and keeps failures in .hypothesis/ to replay them.
_PROPERTY_SETTINGS = dict(deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, **_PROPERTY_SETTINGS)
settings.register_profile("thorough", max_examples=1200, **_PROPERTY_SETTINGS)
settings.load_profile("ci")

def pytest_configure(config):
    config.addinivalue_line("markers", "stacks(*names, why): the stacks a test applies to (tests/stacks.py)")


# The files that take longest on each stack, in seconds (2 cores, 2 pytest-xdist
# processes, 2026-11-29), run longest first. pytest-xdist hands out a file at a time
# in collection order (`--no-loadscope-reorder`, as the Makefile runs it): started
# first, they no longer leave one process working alone at the end. Order changes
# nothing else.
LONGEST_FILES = {
    "pinned": {"engines/test_distribute.py": 284, "engines/test_horovod.py": 281, "cluster/test_faults.py": 105,
               "auto/test_auto.py": 91, "benchmarks/test_main_job.py": 84, "benchmarks/test_e2e.py": 79,
               "callbacks/test_timeline.py": 71, "engines/test_mixed_precision.py": 68,
               "engines/test_keras_tutorial.py": 65, "benchmarks/test_convergence.py": 40,
               "benchmarks/test_long_run.py": 39, "plan/test_plan.py": 34},
    "tf-keras": {"engines/test_keras_tutorial.py": 88, "engines/test_distribute.py": 52,
                 "benchmarks/test_main_job.py": 50, "plan/test_plan.py": 34},
    "keras3": {"engines/test_distribute.py": 269, "cluster/test_faults.py": 123, "benchmarks/test_e2e.py": 80,
               "engines/test_keras_tutorial.py": 74, "benchmarks/test_main_job.py": 53,
               "callbacks/test_timeline.py": 49, "auto/test_auto.py": 47, "benchmarks/test_long_run.py": 42,
               "benchmarks/test_convergence.py": 42, "engines/test_mixed_precision.py": 36},
}


def _file_rank(item, longest):
    path = item.nodeid.split("::")[0].removeprefix("tests/")
    return -longest.get(path, 0)


def pytest_collection_modifyitems(config, items):
    from tests import stacks  # pylint: disable=import-outside-toplevel
    stack, unmarked = stacks.in_use(), []
    items.sort(key=lambda item: _file_rank(item, LONGEST_FILES[stack]))  # stable: a file's tests keep their order
    for item in items:
        if item.get_closest_marker("stacks") is None:
            unmarked.append(item.nodeid)
        elif (why := stacks.not_here(item, stack)) is not None:
            item.add_marker(pytest.mark.skip(reason=why))
    if unmarked:
        raise pytest.UsageError("every test says which stacks it applies to (tests/stacks.py); these do not:\n  "
                                + "\n  ".join(unmarked))


def pytest_report_header(config):
    from tests import stacks  # pylint: disable=import-outside-toplevel
    return f"tfcomp stack: {stacks.in_use()}"


def pytest_terminal_summary(terminalreporter):
    """How many tests were not for this stack, by reason (-rs lists them one by one)."""
    reasons = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith("not on the "):
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda r: -r[1]):
        terminalreporter.write_line(f"{count} skipped, {reason}")


@pytest.fixture
def compress_from_the_first_step(monkeypatch):
    """For tests of what compression does to a step: compressors whose dense warm-up is
    one epoch (the default) start at the first step where no epoch is known, as with
    warmup_steps=0. Tests of the warm-up itself do not use it."""
    from tfcomp.exchange import step  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(step, "UNKNOWN_EPOCH_STEPS", 0)
