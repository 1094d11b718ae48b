"""Test engines: an in-process K-worker emulator for fast semantic tests."""
from tfcomp.testing.emulator import Emulator

__all__ = ["Emulator"]
