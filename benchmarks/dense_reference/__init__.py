"""tfcomp's dense exchange against the engine's own allreduce:
`python -m benchmarks.dense_reference` (__main__.py) and the Horovod rank it launches."""
