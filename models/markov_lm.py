"""A synthetic language for next-token prediction, and an LSTM language model for it.

Text comes from a second-order Markov chain over VOCAB tokens: the next token
is RULE(previous two) with probability `determinism`, else uniform. Nothing is
downloaded, the data are the same on every machine for a seed, and the best
possible next-token accuracy is known: determinism + (1 - determinism) / VOCAB
(about 0.81 by default), reachable only by a model that remembers two tokens.
"""
import numpy as np
import tensorflow as tf

VOCAB = 16


def _rule(previous, before):
    return (previous + 3 * before + 1) % VOCAB


def generate(num_sequences, length, determinism=0.8, seed=0):
    """[num_sequences, length] int32 tokens."""
    rng = np.random.default_rng(seed)
    tokens = np.empty((num_sequences, length), np.int32)
    tokens[:, :2] = rng.integers(0, VOCAB, (num_sequences, 2))
    for t in range(2, length):
        ruled = _rule(tokens[:, t - 1], tokens[:, t - 2])
        noise = rng.integers(0, VOCAB, num_sequences)
        tokens[:, t] = np.where(rng.random(num_sequences) < determinism, ruled, noise)
    return tokens


def best_accuracy(determinism=0.8):
    return determinism + (1 - determinism) / VOCAB


def load(train_sequences=4096, test_sequences=512, length=20, determinism=0.8, seed=0):
    """((inputs, targets), (test_inputs, test_targets)): targets are the inputs shifted by one."""
    tokens = generate(train_sequences + test_sequences, length + 1, determinism, seed)
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
