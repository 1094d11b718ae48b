"""Extreme classification (DRAGONN's "XML"): one wide bias-free dense layer over fixed
features, trained alone, for the many-class vectors of models.teacher.

DRAGONN trains only the last layer of its Wiki10-31K model, 4096 inputs by
30938 classes without bias: one 126,722,048-parameter gradient tensor (507 MB).
Here the features come from a fixed random ReLU embedding of the teacher's
low-dimensional inputs, a layer that is not trained, so the head's gradient is
the only one, as in the paper. ReLU random features keep the teacher's nearest
centre the best match in feature space, so the head can learn it; a linear
embedding would also make every gradient low-rank, which flatters low-rank
compressors.
"""
import tensorflow as tf

layers = tf.keras.layers


def build(inputs=128, features=4096, classes=30938, seed=1):
    """[batch, inputs] -> fixed ReLU embedding [batch, features] -> [batch, classes] logits."""
    tf.keras.utils.set_random_seed(seed)
    x = tf.keras.Input((inputs,))
    embedded = layers.Dense(features, activation="relu", use_bias=False, trainable=False, name="embedding",
                            kernel_initializer="he_normal")(x)
    return tf.keras.Model(x, layers.Dense(classes, use_bias=False, name="head")(embedded))


def build_bottleneck(inputs=128, hidden=2048, bottleneck=16, classes=32768, seed=1):
    """[batch, inputs] -> two ReLU layers of hidden -> a linear bottleneck -> [batch, classes]
    logits: XML-CNN's low-dimensional layer before a wide output layer (Liu et al.,
    SIGIR'17), trained end to end. Its gradients differ in shape: hidden x hidden is square,
    a low-rank compressor's best case; bottleneck x classes is tall and thin, where rank r
    keeps r / bottleneck of it and a sparsifier or signs send far less."""
    tf.keras.utils.set_random_seed(seed)
    x = tf.keras.Input((inputs,))
    h = layers.Dense(hidden, activation="relu", name="hidden1")(x)
    h = layers.Dense(hidden, activation="relu", name="hidden2")(h)
    z = layers.Dense(bottleneck, name="bottleneck")(h)
    return tf.keras.Model(x, layers.Dense(classes, name="head")(z))
