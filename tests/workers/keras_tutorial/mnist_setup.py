"""The tutorial's mnist_setup.py ("Multi-worker training with Keras", tensorflow.org),
with one change: the data is bundled (scikit-learn's digits drawn at MNIST's 28x28
and 0-255) in place of the MNIST download, which these machines cannot reach."""
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def load_data():
    """(x_train, y_train), (x_test, y_test) as tf.keras.datasets.mnist.load_data() returns them:
    uint8 images of 28x28 in [0, 255] and their labels."""
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3)))  # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))  # MNIST's border: 28x28
    images = np.round(images * (255 / 16)).astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    return (images[:1500], labels[:1500]), (images[1500:], labels[1500:])


def mnist_dataset(batch_size):
    (x_train, y_train), _ = load_data()
    # uint8 values in [0, 255] to float32 in [0, 1]
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
    return train_dataset


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation='relu'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dense(10)
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=['accuracy'])
    return model
