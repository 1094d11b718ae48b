"""The benchmark scripts (benchmarks/) and what they measure with tfcomp: the only tests that import benchmarks."""
