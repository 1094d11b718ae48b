"""Efficiency-aware tensor selection (DRAGONN, Eq. 1): compress a tensor only
when compressing it costs less time than it saves on the network.

The network times are tfcomp.costs.network's (one model for selection, the
simulator and the planner). The paper prints the saving of an allgathered
compressed tensor as (K-1)(alpha + (1/K - gamma) dA/B); its two cost formulas
give 2/K, not 1/K, and this module uses the formulas themselves. The
compression time (encode and decode) is measured once per compressor over a
range of sizes on this machine (cached on disk) and interpolated.
"""
import functools
import hashlib
import inspect
import json
import os
import pathlib
import platform
import time

import numpy as np
import tensorflow as tf
from absl import logging

from tfcomp.costs.network import Network
from tfcomp.costs.tables import SizeTable
from tfcomp.exchange import profile_cache
from tfcomp.compressors.base import Collective, TensorContext
from tfcomp.ops import loader

PROFILE_SIZES = tuple(4**e for e in range(5, 12))  # 1 Ki to 4 Mi elements
MEASURE_RUNS = 7


def dense_seconds(shape, dtype, num_workers, network):
    nbytes = tf.TensorShape(shape).num_elements() * tf.as_dtype(dtype).size
    return network.collective_seconds(Collective.ALLREDUCE, nbytes, num_workers)


def compressed_seconds(compressor, shape, dtype, num_workers, network):
    """Network time of the compressor's payloads: each round's payloads, per collective."""
    total = 0.0
    for specs in compressor.payload_specs(shape, dtype):
        by_kind = {}
        for spec in specs:
            by_kind[spec.collective] = by_kind.get(spec.collective, 0) + spec.nbytes
        total += sum(network.collective_seconds(kind, nbytes, num_workers) for kind, nbytes in by_kind.items())
    return total


class CompressionProfile(SizeTable):
    """Encode + decode seconds of one compressor by tensor size in elements: a
    tfcomp.costs.tables.SizeTable (piecewise linear between measured sizes, linear
    in size beyond), measured on this machine and cached."""

    def __init__(self, sizes, seconds):
        if len(sizes) != len(seconds) or not sizes:
            raise ValueError("a profile needs one time per size")
        super().__init__(list(zip(sizes, seconds)), "compression profile")

    def time(self, num_elements):
        return self(num_elements)

    @classmethod
    def measure(cls, compressor, sizes=PROFILE_SIZES, runs=MEASURE_RUNS):
        """Times compress + finish on this machine (one worker, eagerly): the fastest
        of runs, since on a shared machine noise only adds time, and a profile
        taken in one busy moment would otherwise be cached for good."""
        seconds = []
        for n in sizes:
            grad = tf.constant(np.random.default_rng(n).standard_normal((n // 64, 64)).astype(np.float32))
            variables = {name: tf.Variable(tf.zeros(shape, dtype), trainable=False)
                         for name, (shape, dtype) in compressor.state_specs(grad.shape, grad.dtype).items()}
            ctx = TensorContext("profile", 1, tf.constant(0, tf.int64))

            @tf.function
            def encode_decode(g):
                rnd = compressor.compress(g, variables, ctx)
                while True:
                    out = rnd.finish([_as_gathered(p) for p in rnd.payloads])
                    if not hasattr(out, "payloads"):
                        return out
                    rnd = out

            encode_decode(grad)
            samples = []
            for _ in range(runs):
                start = time.perf_counter()
                encode_decode(grad).numpy()
                samples.append(time.perf_counter() - start)
            seconds.append(min(samples))
        return cls(sizes, seconds)

    @classmethod
    def cached(cls, compressor, cache_dir=None):
        """measure(), kept on disk per compressor configuration, TensorFlow and machine."""
        key = json.dumps({"compressor": compressor.config(), "tf": tf.__version__, **machine(),
                          "code": codec_code(type(compressor)),
                          "sizes": PROFILE_SIZES, "measure": f"fastest of {MEASURE_RUNS}"},
                         sort_keys=True, default=str)
        cache_dir = pathlib.Path(cache_dir or os.environ.get("TFCOMP_CACHE_DIR",
                                                             pathlib.Path.home() / ".cache" / "tfcomp"))
        path = cache_dir / "profiles" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
        seconds = profile_cache.load(path, key, PROFILE_SIZES)
        if seconds is not None:
            return cls(PROFILE_SIZES, seconds)
        profile = cls.measure(compressor)
        try:
            profile_cache.store(path, key, profile.sizes, profile.seconds)
        except OSError as err:  # a cache that cannot be written costs a measurement per process, no more
            logging.warning("tfcomp: cannot write the compression profile %s (%s); it is measured again "
                            "by the next process", path, err)
        return profile


@functools.lru_cache(maxsize=None)
def codec_code(compressor_class):
    """A digest of the code a compressor's codec runs (the op library and the compressor's
    module), so that a profile measured before an upgrade is measured again, not trusted."""
    digest = hashlib.sha256()
    for path in (loader.library_path(), inspect.getsourcefile(compressor_class)):
        try:
            digest.update(pathlib.Path(path).read_bytes())
        except (OSError, TypeError):  # no file to read: the key still names the compressor
            digest.update(str(path).encode())
    return digest.hexdigest()[:16]


def _key(compressor):
    return json.dumps(compressor.config(), sort_keys=True, default=str)


def machine():
    """The processor model and GPUs profiles are measured on, so that a cache in a
    home directory that several kinds of machine share keeps their profiles apart."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), cpu)
    except OSError:  # not Linux
        pass
    gpus = [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
            for gpu in tf.config.list_physical_devices("GPU")]
    return {"cpu": cpu, "gpus": gpus}


def _as_gathered(payload):
    """A one-worker collective's result for this payload."""
    if payload.collective is Collective.ALLGATHER:
        return payload.tensor[None]
    return payload.tensor


class EfficiencyAwareSelection:
    """Compresses a tensor iff its compression time < dense time - compressed time on the network."""

    def __init__(self, network=None, profiles=None):
        self.network = network or Network()
        self._profiles = dict(profiles or {})
        self._shared = False

    def profile(self, compressor):
        key = _key(compressor)
        if key not in self._profiles:
            if self._shared:
                # One worker's own measurement can tip a borderline tensor the other
                # way than on its peers: their payloads, and collectives, would differ.
                raise RuntimeError(
                    f"tfcomp: the workers shared compression profiles for {sorted(self._profiles)}, not "
                    f"for {key}; deciding from this worker's own measurement could plan other "
                    "payloads than its peers'. Share the profile of every compressor the exchange runs.")
            with tf.init_scope():  # measured eagerly even when asked while a step is traced
                self._profiles[key] = CompressionProfile.cached(compressor)
        return self._profiles[key]

    def set_profile(self, compressor, profile):
        self._profiles[_key(compressor)] = profile

    def mark_shared(self):
        """The profiles are the workers' shared ones: from now on a compressor
        without one is an error, not a local measurement."""
        self._shared = True

    def same_profile(self, compressor, like):
        """compressor is timed as like is (a compressor that differs from like only
        in what does not change its compression time, such as resolved momentum)."""
        if _key(compressor) != _key(like):
            self.set_profile(compressor, self.profile(like))

    def saving_seconds(self, compressor, shape, dtype, num_workers):
        """Network time saved minus compression time (positive: compress)."""
        saved = (dense_seconds(shape, dtype, num_workers, self.network)
                 - compressed_seconds(compressor, shape, dtype, num_workers, self.network))
        return saved - self.profile(compressor).time(tf.TensorShape(shape).num_elements())

    def worth_compressing(self, compressor, shape, dtype, num_workers):
        return self.saving_seconds(compressor, shape, dtype, num_workers) > 0

    def config(self):
        return {"bandwidth_gbps": self.network.bandwidth_gbps, "latency_us": self.network.latency_us}
