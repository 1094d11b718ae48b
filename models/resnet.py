"""ResNet-50 (tf.keras.applications, random weights) and a smaller ResNet of the same
bottleneck design with depth and width knobs, for the images of models.teacher.

keras.applications' ResNet50 has no width knob, so `build` rebuilds its blocks
(batch normalisation after every convolution, bottlenecks 4x wide): with blocks
(3, 4, 6, 3), width 64 and the ImageNet stem it is keras.applications' ResNet50
(25,583,592 trainable parameters in 214 tensors), and smaller settings keep the
family's shape. Keras gives every convolution a bias, redundant before batch
normalisation; torchvision's ResNet-50 (PyTorch, the papers' framework) has
none: conv_bias=False gives its 25,557,032 parameters in 161 tensors.
"""
import tensorflow as tf

layers = tf.keras.layers
_EPSILON = 1.001e-5  # as keras.applications' ResNet


def build_resnet50(classes=1000, image_size=32, seed=1):
    """keras.applications.ResNet50 with logits; its parameters do not depend on image_size (>= 32)."""
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3),
                                          classes=classes, classifier_activation=None)


def _bottleneck(x, filters, stride, project, bias):
    shortcut = x
    if project:
        shortcut = layers.Conv2D(4 * filters, 1, strides=stride, use_bias=bias)(x)
        shortcut = layers.BatchNormalization(epsilon=_EPSILON)(shortcut)
    x = layers.Conv2D(filters, 1, strides=stride, use_bias=bias)(x)
    x = layers.Activation("relu")(layers.BatchNormalization(epsilon=_EPSILON)(x))
    x = layers.Conv2D(filters, 3, padding="same", use_bias=bias)(x)
    x = layers.Activation("relu")(layers.BatchNormalization(epsilon=_EPSILON)(x))
    x = layers.BatchNormalization(epsilon=_EPSILON)(layers.Conv2D(4 * filters, 1, use_bias=bias)(x))
    return layers.Activation("relu")(layers.Add()([shortcut, x]))


def build(blocks=(1, 1, 1, 1), width=16, classes=10, image_size=16, stem="small", conv_bias=True, seed=1):
    """A bottleneck ResNet: stage i has blocks[i] blocks of width * 2**i filters (4x at the output).

    stem "imagenet" is ResNet-50's (7x7/2 convolution, 3x3/2 max-pooling);
    "small" a 3x3/1 convolution, for images of 32 pixels or fewer.
    """
    tf.keras.utils.set_random_seed(seed)
    inputs = tf.keras.Input((image_size, image_size, 3))
    if stem == "imagenet":
        x = layers.Conv2D(width, 7, strides=2, use_bias=conv_bias)(layers.ZeroPadding2D(3)(inputs))
        x = layers.Activation("relu")(layers.BatchNormalization(epsilon=_EPSILON)(x))
        x = layers.MaxPooling2D(3, strides=2)(layers.ZeroPadding2D(1)(x))
    elif stem == "small":
        x = layers.Conv2D(width, 3, padding="same", use_bias=conv_bias)(inputs)
        x = layers.Activation("relu")(layers.BatchNormalization(epsilon=_EPSILON)(x))
    else:
        raise ValueError(f"unknown stem {stem!r}: choose from imagenet, small")
    for stage, count in enumerate(blocks):
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(x, width * 2 ** stage, stride, project=block == 0, bias=conv_bias)
    x = layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inputs, layers.Dense(classes)(x))
