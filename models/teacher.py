"""Synthetic but learnable classification data: a fixed random teacher labels random inputs.

The teacher is a seeded random linear map whose rows are class centres. Inputs
are drawn around a centre picked uniformly, and each is labelled by the
teacher's argmax (its nearest centre). Labels are then a deterministic function
of the input, so accuracy rises from chance (1 / classes) as a model learns the
centres and can reach 1 (`best_accuracy`; below 1 only with `flip`, the
fraction of labels replaced by uniform ones). Classes are balanced up to the few
inputs the noise carries nearer another centre. Nothing is downloaded; numpy,
vectorised, the same arrays on every machine for a seed.

Every function returns ((x_train, y_train), (x_test, y_test)) with int64 labels.
"""
import numpy as np

CLS = 0  # the token every `tokens` sequence starts with, as BERT's [CLS]


def best_accuracy(classes, flip=0.0):
    """The accuracy of the teacher itself on labels of which `flip` were redrawn uniformly."""
    return 1.0 - flip + flip / classes


def _unit_rows(rng, rows, dim):
    centres = rng.standard_normal((rows, dim), dtype=np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def _nearest(x, centres, chunk=1024):
    """The teacher: argmax over classes of x . c - |c|^2 / 2, in chunks (many classes)."""
    offset = 0.5 * np.sum(centres * centres, axis=1)
    return np.concatenate([np.argmax(x[i:i + chunk] @ centres.T - offset, axis=1)
                           for i in range(0, len(x), chunk)]).astype(np.int64)


def _flip(rng, labels, classes, flip):
    redraw = rng.random(len(labels)) < flip
    return np.where(redraw, rng.integers(0, classes, len(labels)), labels)


def _split(x, y, n):
    return (x[:n], y[:n]), (x[n:], y[n:])


def vectors(n, dim, classes, seed=0, test=None, noise=0.5, flip=0.0):
    """[n, dim] float32 inputs of unit variance per coordinate: a centre of norm sqrt(dim)
    plus Gaussian noise of norm about noise * sqrt(dim)."""
    test = max(n // 4, 1) if test is None else test
    rng = np.random.default_rng(seed)
    centres = _unit_rows(rng, classes, dim) * np.float32(np.sqrt(dim))
    picked = rng.integers(0, classes, n + test)
    x = centres[picked] + rng.standard_normal((n + test, dim), dtype=np.float32) * np.float32(noise)
    return _split(x, _flip(rng, _nearest(x, centres), classes, flip), n)


def images(n, height, width, channels, classes, seed=0, test=None, cells=4, noise=1.0, flip=0.0):
    """[n, height, width, channels] float32 images: a class's coarse pattern plus pixel noise.

    Each centre is a random cells x cells x channels pattern (unit variance per
    value) blown up to the image size, so neighbouring pixels agree and a
    convolutional network finds it; the teacher compares the cell averages of
    an image with each pattern. `noise` is the pixel noise's standard deviation.
    """
    if height % cells or width % cells:
        raise ValueError(f"image size {height}x{width} is not a multiple of cells={cells}")
    test = max(n // 4, 1) if test is None else test
    rng = np.random.default_rng(seed)
    patterns = rng.standard_normal((classes, cells, cells, channels), dtype=np.float32)
    picked = rng.integers(0, classes, n + test)
    cell_h, cell_w = height // cells, width // cells
    x = np.repeat(np.repeat(patterns[picked], cell_h, axis=1), cell_w, axis=2)
    x += rng.standard_normal(x.shape, dtype=np.float32) * noise
    averages = x.reshape(n + test, cells, cell_h, cells, cell_w, channels).mean(axis=(2, 4))
    labels = _nearest(averages.reshape(n + test, -1), patterns.reshape(classes, -1))
    return _split(x, _flip(rng, labels, classes, flip), n)


def tokens(n, length, vocab, classes=2, seed=0, test=None, tilt=0.5, flip=0.0):
    """[n, length] int32 token ids starting with CLS, labelled from token counts.

    The teacher gives every token a random score per class and labels a
    sequence by the class with the highest summed score (a linear map of the
    token counts). Tokens after CLS are drawn from a class's distribution,
    which favours the tokens scoring high for it (probability proportional to
    exp(tilt * score)), so the labels are balanced and depend on many tokens.
    """
    test = max(n // 4, 1) if test is None else test
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((vocab, classes), dtype=np.float32)
    scores[CLS] = 0.0
    picked = rng.integers(0, classes, n + test)
    x = np.full((n + test, length), CLS, np.int32)
    for c in range(classes):
        rows = np.flatnonzero(picked == c)
        weights = np.exp(tilt * scores[1:, c].astype(np.float64))
        cumulative = np.cumsum(weights / weights.sum())
        draws = rng.random((len(rows), length - 1))
        x[rows, 1:] = 1 + np.minimum(np.searchsorted(cumulative, draws), vocab - 2)
    labels = np.argmax(scores[x].sum(axis=1), axis=1).astype(np.int64)
    return _split(x, _flip(rng, labels, classes, flip), n)
