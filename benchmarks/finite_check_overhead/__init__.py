"""The cost of the exchange's non-finite check: `python -m benchmarks.finite_check_overhead`
(__main__.py) and the worker it launches."""
