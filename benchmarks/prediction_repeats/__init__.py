"""tfcomp.analysis's predictions against repeated measurements:
`python -m benchmarks.prediction_repeats` (__main__.py)."""
