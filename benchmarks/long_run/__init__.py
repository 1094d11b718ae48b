"""Long runs watched for retracing and growth: `python -m benchmarks.long_run`
(__main__.py), the worker it launches, what the worker samples (probe) and the report."""
