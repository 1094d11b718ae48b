"""Exact-zero gradients under the sign compressors: `python -m benchmarks.sign_zeros` (__main__.py)."""
