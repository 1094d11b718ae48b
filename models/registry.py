"""The reference models of the papers tfcomp implements, by name: each at a small size
that trains in seconds on a 2-core CPU and at the papers' size, with its synthetic
learnable data, what to compile it with, and what its gradients weigh.

    spec = MODELS["xml"]
    model = spec.build("small", seed=1)
    (x, y), (x_test, y_test) = spec.data("small", seed=0)
    spec.compile(model, spec.optimizer())

`python -m models.registry [--full]` prints the sizes table of models/README.md.
"""
import dataclasses
import math
import sys
from typing import Callable, Optional

import tensorflow as tf

from models import bert, digits, extreme, markov_lm, resnet, teacher, vgg

MIB = 2 ** 20
SGD_MOMENTUM = 0.9  # what every model but the encoder trains with


@dataclasses.dataclass(frozen=True)
class Size:
    describe: str
    model: Callable  # the family's builder, called with model_args and seed
    model_args: dict
    data: Callable  # ... -> ((x, y), (x_test, y_test)), called with data_args and seed
    data_args: dict
    chance: float  # the metric of a uniform guess
    best: Optional[float]  # the metric of the teacher (None: not known)


@dataclasses.dataclass(frozen=True)
class Paper:
    """The papers' figures (the five papers' model tables; sizes in MiB of float32 parameters); None where not given."""
    params: Optional[float]
    bytes: Optional[float]
    tensors: Optional[int]
    source: str


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    describe: str
    task: str
    sizes: dict  # "small", "full", sometimes more -> Size
    paper: Paper
    learning_rate: float  # with which `optimizer` learns the small size's task in a few epochs
    batch_size: int
    metric: object = "accuracy"  # a Keras metric, its name or a function (targets, logits)
    optimizer_name: str = "sgd_momentum"  # or "adam"

    def build(self, size="small", seed=1, **overrides):
        """A fresh Keras model with random weights, the same for a seed; overrides replace builder arguments."""
        s = self.sizes[size]
        return s.model(**{**s.model_args, **overrides}, seed=seed)

    def data(self, size="small", seed=0, **overrides):
        """((x_train, y_train), (x_test, y_test)); overrides replace the data function's arguments."""
        s = self.sizes[size]
        return s.data(**{**s.data_args, **overrides}, seed=seed)

    def loss(self):
        return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @property
    def sgd_momentum(self):
        """The momentum of the SGD the model trains with; None under Adam."""
        return None if self.optimizer_name == "adam" else SGD_MOMENTUM

    def optimizer(self, learning_rate=None):
        """SGD with momentum 0.9, or Adam for the encoder (plain SGD leaves it at chance)."""
        learning_rate = self.learning_rate if learning_rate is None else learning_rate
        if self.optimizer_name == "adam":
            return tf.keras.optimizers.Adam(learning_rate)
        return tf.keras.optimizers.SGD(learning_rate, momentum=self.sgd_momentum)

    def compile(self, model, optimizer, **kwargs):
        model.compile(optimizer=optimizer, loss=self.loss(), metrics=[self.metric], **kwargs)


def gradient_summary(model):
    """(number of trainable tensors, their total bytes, [(name, shape, bytes)]): what one
    data-parallel step exchanges before compression."""
    rows = [(v.name, tuple(v.shape), math.prod(v.shape) * tf.as_dtype(v.dtype).size) for v in model.trainable_variables]
    return len(rows), sum(r[2] for r in rows), rows


def _image_size(describe, model, model_args, classes, image_size, n, test, cells=4):
    data_args = dict(n=n, test=test, height=image_size, width=image_size, channels=3, classes=classes, cells=cells)
    return Size(describe, model, {**model_args, "classes": classes, "image_size": image_size},
                teacher.images, data_args, 1 / classes, teacher.best_accuracy(classes))


def _digits():
    size = Size("64-512-512-10 MLP, scikit-learn digits", digits.build, dict(hidden=512),
                lambda seed: digits.load(seed=seed), {}, 0.1, None)
    return Spec("digits_mlp", "digits MLP (the main job's)", "scikit-learn's 8x8 digits, 10 classes",
                {"small": size, "full": size}, Paper(None, None, None, "not in the papers"),
                learning_rate=0.05, batch_size=32)  # the main job's rate since the start


def _resnet50():
    return Spec(
        "resnet50", "ResNet-50", "teacher-labelled noisy images (4x4 class patterns)",
        {"small": _image_size("bottleneck ResNet, blocks 1-1-1-1, width 16, 16x16 images", resnet.build,
                              dict(blocks=(1, 1, 1, 1), width=16, stem="small"), 10, 16, 2048, 512),
         "full": _image_size("keras.applications.ResNet50, 1000 classes, 32x32 images", resnet.build_resnet50,
                             {}, 1000, 32, 2048, 512)},
        Paper(25.6e6, 97.5 * MIB, None, "P2 Table I: 25.6M, 97.5MB; 97 MB in P1, P3"),
        learning_rate=0.05, batch_size=32)


def _vgg16():
    narrow = (16, 32, 64, 128, 128)
    return Spec(
        "vgg16", "VGG-16", "teacher-labelled noisy images (class patterns of 4x4 or 7x7 cells)",
        {"small": _image_size("VGG-16 layout, widths 8-64, pooled 3x, dense 256, 32x32 images", vgg.build,
                              dict(widths=(8, 16, 32, 64, 64), pools=3, dense=256), 10, 32, 2048, 512),
         "full_dense": _image_size("VGG-16's full dense layers (25088x4096 first) on a 4x narrower trunk "
                                   "pooled 2x, 56x56 images", vgg.build, dict(widths=narrow, pools=2),
                                   1000, 56, 1024, 256, cells=7),
         "full": _image_size("keras.applications.VGG16, 1000 classes, 224x224 images", vgg.build_vgg16,
                             {}, 1000, 224, 256, 64, cells=7)},
        Paper(138.4e6, 527.5 * MIB, 32, "528 MB and 32 tensors (P5), 527 MB with one ~400 MB layer (P3)"),
        learning_rate=0.002, batch_size=64)


def _bert():
    def size(describe, model_args, vocab, seq_length, n, test):
        return Size(describe, bert.build, {**model_args, "vocab": vocab, "seq_length": seq_length, "classes": 2},
                    teacher.tokens, dict(n=n, test=test, length=seq_length, vocab=vocab, classes=2),
                    0.5, teacher.best_accuracy(2))
    return Spec(
        "bert", "BERT-base-like encoder", "2 classes from a teacher over token counts",
        {"small": size("2 layers, hidden 64, 2 heads, vocabulary 1000, 32 tokens",
                       dict(hidden=64, num_layers=2, heads=2, intermediate=256, max_positions=64), 1000, 32, 4096, 512),
         "full": size("BERT-base: 12 layers, hidden 768, 12 heads, vocabulary 30522, 128 tokens", {},
                      30522, 128, 1024, 256)},
        Paper(110.1e6, 420 * MIB, 207, "110.1M (P2), 420 MB and 207 tensors (P5); 418 MB in P1"),
        learning_rate=1e-3, batch_size=32, optimizer_name="adam")


def _lstm_lm():
    def size(describe, model_args, vocab, length, sequences, test):
        return Size(describe, markov_lm.build_lm, {**model_args, "vocab": vocab}, markov_lm.load,
                    dict(train_sequences=sequences, test_sequences=test, length=length, vocab=vocab),
                    1 / vocab, markov_lm.best_accuracy(vocab=vocab))
    return Spec(
        "lstm_lm", "LSTM language model", "next token of a 2nd-order Markov chain (accuracy from the 2nd target)",
        {"small": size("2 tied LSTM layers of 128, vocabulary 16, 20 tokens",
                       dict(embedding=128, units=128), markov_lm.VOCAB, 20, 4096, 512),
         "full": size("2 tied LSTM layers of 1500, vocabulary 33278 (WikiText-2), 35 tokens", {},
                      33278, 35, 1024, 256)},
        Paper(None, 328 * MIB, 10, "328 MB and 10 tensors (P5: AWD-LSTM on WikiText-2, no architecture given)"),
        learning_rate=3.0, batch_size=32, metric=markov_lm.predictable_accuracy)


def _xml():
    def size(describe, features, classes, n, test):
        return Size(describe, extreme.build, dict(inputs=128, features=features, classes=classes),
                    teacher.vectors, dict(n=n, test=test, dim=128, classes=classes, noise=0.2),
                    1 / classes, teacher.best_accuracy(classes))
    return Spec(
        "xml", "extreme classification (DRAGONN's XML)", "teacher-labelled vectors, as many classes as the head",
        {"small": size("fixed ReLU embedding 128->512, head 512x4096", 512, 4096, 32768, 4096),
         # Communication-heavy on a 2-core machine: 64 MiB of gradient per step, little compute.
         "medium": size("fixed ReLU embedding 128->4096, head 4096x4096", 4096, 4096, 32768, 4096),
         "full": size("fixed ReLU embedding 128->4096, head 4096x30938 (Wiki10-31K)", 4096, 30938, 16384, 2048)},
        Paper(126.72e6, 507e6, 1, "P4: last layer 4096x30938, no bias, 126.72M, 507MB (decimal)"),
        learning_rate=0.1, batch_size=256)


def _xml_bottleneck():
    size = Size("MLP 128-2048-2048, bottleneck 16, head 16x32768", extreme.build_bottleneck,
                dict(inputs=128, hidden=2048, bottleneck=16, classes=32768),
                teacher.vectors, dict(n=32768, test=4096, dim=128, classes=32768, noise=0.2),
                1 / 32768, teacher.best_accuracy(32768))
    return Spec(
        "xml_bottleneck", "extreme classification behind a bottleneck (XML-CNN's layout)",
        "teacher-labelled vectors, as many classes as the head",
        {"small": size, "full": size},  # one size: it exists for its mix of tensor shapes, not a paper's size
        Paper(None, None, None, "not in the papers: a model whose tensors favour different compressors"),
        learning_rate=0.1, batch_size=64)


MODELS = {spec.name: spec for spec in (_digits(), _resnet50(), _vgg16(), _bert(), _lstm_lm(), _xml(),
                                       _xml_bottleneck())}


def _table(sizes):
    print("| model | size | params | gradient MiB | tensors | largest tensor | task | chance | best |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in MODELS.values():
        for size_name in sizes:
            if size_name not in spec.sizes:
                continue
            size = spec.sizes[size_name]
            model = spec.build(size_name)
            count, total, rows = gradient_summary(model)
            name, shape, largest = max(rows, key=lambda r: r[2])
            params = sum(v.shape.num_elements() for v in model.trainable_variables)
            best = "—" if size.best is None else f"{size.best:.3f}"
            print(f"| {spec.name} | {size_name}: {size.describe} | {params:,} | {total / MIB:.2f} | {count} | "
                  f"{'x'.join(map(str, shape))} ({largest / MIB:.1f} MiB) | {spec.task} | {size.chance:.4g} | {best} |",
                  flush=True)
            del model
            tf.keras.backend.clear_session()


if __name__ == "__main__":
    _table(("small", "full_dense", "full") if "--full" in sys.argv[1:] else ("small",))
