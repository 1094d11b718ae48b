"""A synthetic language for next-token prediction, and an LSTM language model for it.

Text comes from a second-order Markov chain over VOCAB tokens: the next token
is RULE(previous two) with probability `determinism`, else uniform. Nothing is
downloaded, the data are the same on every machine for a seed, and the best
possible next-token accuracy is known: determinism + (1 - determinism) / VOCAB
(about 0.81 by default), reachable only by a model that remembers two tokens.

`build` is the small model the convergence benchmark trains; `build_lm` the
family with vocabulary, width, depth and tied-softmax knobs, whose defaults
are the large tied setting of PyTorch's word-language-model example on
WikiText-2's 33,278 words (2 LSTM layers, 1500 units, 1500-wide embedding
shared with the softmax); the chain then uses `vocab` tokens.
"""
import numpy as np
import tensorflow as tf

VOCAB = 16


def _rule(previous, before, vocab=VOCAB):
    return (previous + 3 * before + 1) % vocab


def generate(num_sequences, length, determinism=0.8, seed=0, vocab=VOCAB):
    """[num_sequences, length] int32 tokens."""
    rng = np.random.default_rng(seed)
    tokens = np.empty((num_sequences, length), np.int32)
    tokens[:, :2] = rng.integers(0, vocab, (num_sequences, 2))
    for t in range(2, length):
        ruled = _rule(tokens[:, t - 1], tokens[:, t - 2], vocab)
        noise = rng.integers(0, vocab, num_sequences)
        tokens[:, t] = np.where(rng.random(num_sequences) < determinism, ruled, noise)
    return tokens


def best_accuracy(determinism=0.8, vocab=VOCAB):
    return determinism + (1 - determinism) / vocab


def predictable_accuracy(targets, logits):
    """Next-token accuracy from the second target on: the first follows a single token,
    which the rule alone does not determine."""
    predicted = tf.argmax(logits[:, 1:], axis=-1, output_type=tf.int64)
    return tf.reduce_mean(tf.cast(tf.equal(predicted, tf.cast(targets[:, 1:], tf.int64)), tf.float32))


def load(train_sequences=4096, test_sequences=512, length=20, determinism=0.8, seed=0, vocab=VOCAB):
    """((inputs, targets), (test_inputs, test_targets)): targets are the inputs shifted by one."""
    tokens = generate(train_sequences + test_sequences, length + 1, determinism, seed, vocab)
    inputs, targets = tokens[:, :-1], tokens[:, 1:].astype(np.int64)
    cut = train_sequences
    return (inputs[:cut], targets[:cut]), (inputs[cut:], targets[cut:])


def build(embedding=32, units=128, seed=1):
    """Embedding -> LSTM -> per-step logits over the vocabulary."""
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.Input((None,), dtype=tf.int32),
        tf.keras.layers.Embedding(VOCAB, embedding),
        tf.keras.layers.LSTM(units, return_sequences=True),
        tf.keras.layers.Dense(VOCAB),
    ])


class TiedSoftmax(tf.keras.layers.Layer):
    """Logits from the input embedding matrix, transposed, plus a bias (weight tying)."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(self.embedding.input_dim,), initializer="zeros")

    def call(self, hidden):
        return tf.matmul(hidden, self.embedding.embeddings, transpose_b=True) + self.bias


def build_lm(vocab=33278, embedding=1500, units=1500, num_layers=2, tied=True, seed=1):
    """Embedding -> num_layers LSTMs -> per-step logits; tied, the last LSTM has `embedding` units."""
    tf.keras.utils.set_random_seed(seed)
    inputs = tf.keras.Input((None,), dtype=tf.int32)
    embed = tf.keras.layers.Embedding(vocab, embedding)
    x = embed(inputs)
    for layer in range(num_layers):
        last = layer == num_layers - 1
        x = tf.keras.layers.LSTM(embedding if tied and last else units, return_sequences=True)(x)
    logits = TiedSoftmax(embed)(x) if tied else tf.keras.layers.Dense(vocab)(x)
    return tf.keras.Model(inputs, logits)
