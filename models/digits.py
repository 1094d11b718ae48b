"""scikit-learn's digits (1797 8x8 images, shipped inside the package) and an
MLP for them: small enough to train in seconds on a CPU, with a few dense
kernels large enough (hundreds of kB) for compression to matter on a slow link."""
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

NUM_CLASSES = 10


def load(test_fraction=0.2, seed=0):
    """((x_train, y_train), (x_test, y_test)): pixels scaled to [0, 1], a fixed split."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return (x[train], y[train]), (x[test], y[test])


def build(hidden=512, seed=1):
    """An MLP: 64 -> hidden -> hidden -> 10 logits."""
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.Input((64,)),
        tf.keras.layers.Dense(hidden, activation="relu"),
        tf.keras.layers.Dense(hidden, activation="relu"),
        tf.keras.layers.Dense(NUM_CLASSES),
    ])


def build_cnn(seed=1):
    """A small CNN on the 8x8 images: two 3x3 convolutions, max-pooling, two dense layers."""
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.Input((64,)),
        tf.keras.layers.Reshape((8, 8, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(NUM_CLASSES),
    ])
