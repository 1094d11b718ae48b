"""Test engines: an in-process K-worker emulator for fast semantic tests.

Emulator loads on first use (PEP 562), so the TensorFlow-free helpers here
(tests.cluster.netns_cluster) import without TensorFlow."""

__all__ = ["Emulator"]


def __getattr__(name):
    if name == "Emulator":
        from tfcomp.testing.emulator import Emulator  # pylint: disable=import-outside-toplevel
        return Emulator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
