"""tfcomp's main job: `python -m benchmarks.main_job` (`make demo`), __main__.py; its
workers are benchmarks.harness.train_worker, report prints its table and verdict."""
