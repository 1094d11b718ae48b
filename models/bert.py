"""A BERT-like Transformer encoder from Keras layers, with a sequence-classification
head, for the token sequences of models.teacher.

As BERT: word, position and segment embeddings summed and normalised,
post-LayerNorm encoder layers (multi-head self-attention, a GELU feed-forward
layer), a tanh pooler on the first ([CLS]) token. The defaults are BERT-base
(vocabulary 30522, hidden 768, 12 layers, 12 heads, feed-forward 3072, 512
positions, 2 segments): 109,482,240 parameters with the pooler, in 199 tensors
as in BERT's reference code; the classifier adds 2 more.
"""
import tensorflow as tf

layers = tf.keras.layers


def _initializer():
    return tf.keras.initializers.TruncatedNormal(stddev=0.02)  # BERT's


class PositionAndSegment(layers.Layer):
    """Adds BERT's position and segment embeddings. The inputs carry no segment ids:
    the first half of a sequence is segment 0, the rest segment 1 (as a sentence pair)."""

    def __init__(self, max_positions, segments, **kwargs):
        super().__init__(**kwargs)
        self.max_positions, self.segments = max_positions, segments

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.positions = self.add_weight(name="position_embeddings", shape=(self.max_positions, hidden),
                                         initializer=_initializer())
        self.segment_table = self.add_weight(name="token_type_embeddings", shape=(self.segments, hidden),
                                             initializer=_initializer())

    def call(self, x):
        length = tf.shape(x)[1]
        segment = tf.cast(tf.range(length) >= length // 2, tf.int32) * (self.segments - 1)
        return x + self.positions[:length] + tf.gather(self.segment_table, segment)

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "segments": self.segments}


def _encoder_layer(x, hidden, heads, intermediate, dropout):
    attention = layers.MultiHeadAttention(heads, hidden // heads, dropout=dropout,
                                          kernel_initializer=_initializer())(x, x)
    x = layers.LayerNormalization(epsilon=1e-12)(x + layers.Dropout(dropout)(attention))
    h = layers.Dense(intermediate, activation="gelu", kernel_initializer=_initializer())(x)
    h = layers.Dense(hidden, kernel_initializer=_initializer())(h)
    return layers.LayerNormalization(epsilon=1e-12)(x + layers.Dropout(dropout)(h))


def build(vocab=30522, hidden=768, num_layers=12, heads=12, intermediate=3072, max_positions=512,
          segments=2, seq_length=128, classes=2, dropout=0.1, seed=1):
    """[batch, seq_length] token ids -> [batch, classes] logits."""
    if hidden % heads:
        raise ValueError(f"hidden={hidden} is not a multiple of heads={heads}")
    if seq_length > max_positions:
        raise ValueError(f"seq_length={seq_length} exceeds max_positions={max_positions}")
    tf.keras.utils.set_random_seed(seed)
    inputs = tf.keras.Input((seq_length,), dtype=tf.int32)
    x = layers.Embedding(vocab, hidden, embeddings_initializer=_initializer())(inputs)
    x = PositionAndSegment(max_positions, segments)(x)
    x = layers.Dropout(dropout)(layers.LayerNormalization(epsilon=1e-12)(x))
    for _ in range(num_layers):
        x = _encoder_layer(x, hidden, heads, intermediate, dropout)
    pooled = layers.Dense(hidden, activation="tanh", kernel_initializer=_initializer())(x[:, 0])
    logits = layers.Dense(classes, kernel_initializer=_initializer())(layers.Dropout(dropout)(pooled))
    return tf.keras.Model(inputs, logits)
