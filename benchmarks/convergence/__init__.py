"""Convergence of every compressor against dense training on the in-process emulator:
`python -m benchmarks.convergence` (__main__.py); paper_dragonn is a baseline it trains."""
