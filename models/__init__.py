"""Keras reference models for tfcomp's main job, tests and benchmarks."""
