"""The end-to-end benchmark: `python -m benchmarks.e2e` (__main__.py) trains reference
models with real workers over emulated links; worker and link_probe_worker are the
modules it launches, report and validation write its e2e.md and plots (rewritten alone
by `python -m benchmarks.e2e --report_only`)."""
