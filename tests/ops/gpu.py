"""The mark of the op tests that compare a GPU kernel with the CPU one in TensorFlow."""
import pytest
import tensorflow as tf

ON_GPU = pytest.mark.skipif(
    not tf.config.list_physical_devices("GPU"),
    reason="no GPU on this machine: the CUDA kernels are compared with the CPU reference by "
           "tools/cuda_check.sh's standalone tests on a GPU machine")
