"""VGG-16 (tf.keras.applications, random weights) and the same layout with width,
pooling and dense-size knobs, for the images of models.teacher.

VGG-16's point for gradient compression is its dense layers: 123.6M of its
138.4M parameters, 102.8M in the first (25088 x 4096, about 400 MB). `build`
keeps that layer at full size on a narrow, cheap convolutional trunk: with
4x narrower convolutions and pooling after two blocks only, 56x56 images
reach the dense layers as 14 x 14 x 128 = 25088 features, as 224x224 images
do in VGG-16 (7 x 7 x 512).
"""
import tensorflow as tf

layers = tf.keras.layers
CONVOLUTIONS = (2, 2, 3, 3, 3)  # 3x3 convolutions per block
WIDTHS = (64, 128, 256, 512, 512)


def build_vgg16(classes=1000, image_size=224, seed=1):
    """keras.applications.VGG16 with logits; its first dense layer has (image_size / 32)^2 * 512 inputs."""
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.applications.VGG16(weights=None, input_shape=(image_size, image_size, 3),
                                       classes=classes, classifier_activation=None)


def build(widths=WIDTHS, pools=5, dense=4096, classes=1000, image_size=224, seed=1):
    """VGG-16's layout: five blocks of 3x3 convolutions (`widths` filters), 2x2 max-pooling
    after the first `pools` blocks, flatten, two ReLU dense layers of `dense` units, logits.

    He initialisation, made for such deep ReLU stacks without normalisation: with
    keras.applications' Glorot, SGD barely moves the small variant in a few epochs.
    """
    tf.keras.utils.set_random_seed(seed)
    inputs = tf.keras.Input((image_size, image_size, 3))
    x = inputs
    for block, (count, filters) in enumerate(zip(CONVOLUTIONS, widths)):
        for _ in range(count):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu", kernel_initializer="he_normal")(x)
        if block < pools:
            x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    x = layers.Dense(dense, activation="relu", kernel_initializer="he_normal")(x)
    x = layers.Dense(dense, activation="relu", kernel_initializer="he_normal")(x)
    return tf.keras.Model(inputs, layers.Dense(classes)(x))
