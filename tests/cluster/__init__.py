"""The launchers of worker processes (local, Horovod, emulated cluster) the tests and benchmarks share."""
