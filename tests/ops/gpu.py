"""The mark of the op tests that compare a GPU kernel with the CPU one in TensorFlow."""
import pytest
import tensorflow as tf

ON_GPU = pytest.mark.skipif(
    not tf.config.list_physical_devices("GPU"),
    reason="no GPU on this machine: the CUDA kernels are compared with the CPU reference by "
           "tools/cuda_check.sh's standalone tests on a GPU machine")


def assert_same_bits_on_cpu_and_gpu(fn):
    """fn() (a tensor or a tuple of them) gives the same bytes on /CPU:0 as on /GPU:0."""
    outputs = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            result = fn()
        outputs.append([t.numpy().tobytes() for t in (result if isinstance(result, (tuple, list)) else [result])])
    assert outputs[0] == outputs[1]
