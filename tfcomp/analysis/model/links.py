"""The links a prediction runs on: a profile's measured ones, or others given by
bandwidth and latency. The standard library only (predict imports it)."""
from tfcomp.costs.network import Link

DENSE = "dense"  # the uncompressed baseline, as results and tables name it


def links(profile, bandwidth_gbps=None, latency_us=None):
    """(allreduce link, allgather link): the profile's measured ones, with the bandwidth
    and the latency replaced where given (both collectives alike)."""
    def one(measured):
        alpha = measured.alpha_s if latency_us is None else latency_us / 1e6
        bandwidth = measured.bandwidth_bytes_per_s if bandwidth_gbps is None else bandwidth_gbps * 1e9 / 8
        return Link(alpha, bandwidth)
    return one(profile.allreduce), one(profile.allgather)
