"""Modules the multi-process tests launch (python -m tests.workers.NAME) and the workload they share."""
