"""Learning-rate grids of the convergence tasks: `python -m benchmarks.lr_sweep` (__main__.py)."""
