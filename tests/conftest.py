import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
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

HOROVOD_MISSING = ("Horovod is not installed: the current-TensorFlow stack has none "
                   "(0.28.1 does not build against TensorFlow 2.21; README, 'Supported stacks')")


def pytest_configure(config):
    config.addinivalue_line("markers", "horovod: needs Horovod (skipped, with the reason, where it is not installed)")


def pytest_collection_modifyitems(config, items):
    import importlib.util  # pylint: disable=import-outside-toplevel
    if importlib.util.find_spec("horovod") is not None:
        return
    for item in items:
        if item.get_closest_marker("horovod") is not None:
            item.add_marker(pytest.mark.skip(reason=HOROVOD_MISSING))


@pytest.fixture
def compress_from_the_first_step(monkeypatch):
    """For tests of what compression does to a step: compressors whose dense warm-up is
    one epoch (the default) start at the first step where no epoch is known, as with
    warmup_steps=0. Tests of the warm-up itself do not use it."""
    from tfcomp.exchange import step  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(step, "UNKNOWN_EPOCH_STEPS", 0)
