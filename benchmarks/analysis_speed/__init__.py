"""How fast the analysis command line answers: `python -m benchmarks.analysis_speed` (__main__.py)."""
