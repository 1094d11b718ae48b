"""The cost of tfcomp.callbacks.Timeline: `python -m benchmarks.timeline_overhead`
(__main__.py) and the worker it launches."""
