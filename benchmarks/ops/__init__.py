"""Benchmarks of the custom ops and the compressors' hot paths, one module each:
`python -m benchmarks.ops.sign`, `.sparse`, `.dgc_candidates`, `.lowrank`,
`.lowrank_residual`; `python -m benchmarks.ops` (`make bench`) runs the first three."""
