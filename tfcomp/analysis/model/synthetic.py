"""A synthetic profile, plausible but measured on nothing: a ResNet-50-sized CNN
(97.5 MiB of float32 gradients) on one accelerator, 10 Gbit/s links and four
compressors whose payloads follow tfcomp's (costs.*_transfers), measured on the CPU
and, with gpu=True, on the GPU that trains too ('name@gpu', GPU_SPEEDUP times faster,
on the compute stream: what Espresso's Algorithm 2 offloads from). It gives the
command line's docs, tests and benchmarks a profile without a GPU or TensorFlow;
tests/data/synthetic_resnet50_profile.json is synthetic_profile() saved.
"""
import math

from tfcomp.costs import network as costs
from tfcomp.costs.network import Link
from tfcomp.analysis.model.profile import CompressorProfile, GradientProfile, ModelProfile, Profile
from tfcomp.costs.tables import SizeTable
from tfcomp.plan.file import GPU_SUFFIX

MIB = 2**20
CLASSES = 1000
POWERSGD_RANK = 4
TOPK_FRACTION = 0.01
GPU_SPEEDUP = 8.0  # the GPU variants' encode and decode, this many times faster than the CPU's

# (bytes, seconds): a kernel's fixed launch cost, then roughly linear in size.
ENCODE_DECODE = {
    "FP16": ([(1e3, 4e-6), (1e8, 1.2e-3)], [(1e3, 4e-6), (1e8, 1.2e-3)]),
    "PowerSGD": ([(1e3, 3e-5), (1e8, 9e-3)], [(1e3, 1e-5), (1e8, 3e-3)]),
    "TopK": ([(1e3, 2e-5), (1e8, 1.6e-2)], [(1e3, 1e-5), (1e8, 2e-3)]),
    "SignSGD": ([(1e3, 8e-6), (1e8, 2.5e-3)], [(1e3, 8e-6), (1e8, 2.5e-3)]),
}


def _layers(conv_layers):
    """Output channels of each conv layer, forward order: four stages doubling 256 to 2048,
    as ResNet-50's bottleneck outputs do."""
    return [256 * 2 ** min(3, 4 * i // conv_layers) for i in range(conv_layers)]


def _gradients(conv_layers, total_bytes, backward_s):
    """(name, elements, output channels, ready_s) in backward order: the classifier first,
    then each conv layer's BatchNorm beta, gamma and kernel, deepest first. The kernels
    share what the classifier and BatchNorm leave of total_bytes, in proportion to their
    channels squared; one layer's gradients are ready every backward_s / conv_layers."""
    channels = _layers(conv_layers)
    fc = channels[-1] * CLASSES
    vector_elements = CLASSES + 2 * sum(channels)
    kernel_elements = total_bytes / costs.FLOAT32_BYTES - fc - vector_elements
    weight = sum(c * c for c in channels)
    step = backward_s / (conv_layers + 1)
    out = [("fc/bias", CLASSES, 1, 0.5 * step), ("fc/kernel", fc, CLASSES, step)]
    for j, i in enumerate(reversed(range(conv_layers))):
        ready = min(backward_s, (j + 2) * step)
        c = channels[i]
        out += [(f"conv{i}/bn/beta", c, 1, ready), (f"conv{i}/bn/gamma", c, 1, ready),
                (f"conv{i}/kernel", max(c, round(kernel_elements * c * c / weight)), c, ready)]
    return out


def _payloads(name, elements, channels):
    """What compressor `name` sends for one gradient; PowerSGD sends vectors dense."""
    if name == "FP16":
        return costs.fp16_transfers(elements)
    if name == "PowerSGD":
        if channels == 1:
            return costs.dense_transfers(elements)
        return costs.powersgd_transfers(channels, math.ceil(elements / channels), POWERSGD_RANK)
    if name == "TopK":
        return costs.sparse_transfers(elements, TOPK_FRACTION)
    if name == "SignSGD":
        return costs.sign_transfers(elements)
    raise ValueError(f"no synthetic payload for compressor {name!r}; choose from {sorted(ENCODE_DECODE)}")


def synthetic_profile(conv_layers=53, total_bytes=97.5 * MIB, forward_s=0.040, backward_s=0.080, apply_s=0.005,
                      gpu=False):
    """The synthetic profile: 3 * conv_layers + 2 gradients (161 by default, ResNet-50's count);
    gpu: each compressor measured on the GPU too ('name@gpu')."""
    if not isinstance(conv_layers, int) or conv_layers < 4:
        raise ValueError(f"conv_layers must be an integer >= 4 (one a stage), got {conv_layers!r}")
    grads = _gradients(conv_layers, total_bytes, backward_s)
    model = ModelProfile("synthetic_resnet50", forward_s, backward_s, apply_s,
                         [GradientProfile(name, elements * costs.FLOAT32_BYTES, ready)
                          for name, elements, _, ready in grads])
    compressors = {
        name: CompressorProfile(name, SizeTable(encode, f"{name} encode"), SizeTable(decode, f"{name} decode"),
                                {g: _payloads(name, elements, channels) for g, elements, channels, _ in grads})
        for name, (encode, decode) in ENCODE_DECODE.items()}
    if gpu:
        for name, c in list(compressors.items()):
            faster = [SizeTable([(b, s / GPU_SPEEDUP) for b, s in t.points()], f"{name}{GPU_SUFFIX} {what}")
                      for t, what in ((c.encode, "encode"), (c.decode, "decode"))]
            compressors[name + GPU_SUFFIX] = CompressorProfile(name + GPU_SUFFIX, *faster, c.payloads)
    return Profile(model, allreduce=Link.from_gbit(10, alpha_s=30e-6), allgather=Link.from_gbit(9, alpha_s=40e-6),
                   addest=SizeTable([(1e4, 4e-6), (1e8, 1.1e-3)], "AddEst"), compressors=compressors)
