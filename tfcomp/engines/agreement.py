"""What every engine checks and shares when it starts, whatever its collectives:
the workers run the same exchange, and tensor selection decides from the same
(averaged) compression profile, so that payloads line up."""
import json
import zlib

from tfcomp.exchange.selection import CompressionProfile


def fingerprint(exchange):
    """(the exchange's config as text, its CRC32): what the workers compare."""
    config = json.dumps(exchange.config(), sort_keys=True, default=str)
    return config, zlib.crc32(config.encode())


def check_workers_agree(exchange, gather, rank, worker_word="task"):
    """Raises ValueError on every worker if the workers run different exchanges.

    gather(int) -> every worker's int, in rank order (one collective that all
    workers join, so no worker waits for one that has already failed).
    """
    config, mine = fingerprint(exchange)
    gathered = [int(f) for f in gather(mine)]
    if len(set(gathered)) != 1:
        raise ValueError(
            f"workers disagree on the compression: this worker ({worker_word} {rank}) runs {config} "
            f"(fingerprint {mine}); the workers' fingerprints in {worker_word} order are {gathered}. "
            f"Give every worker the same compression= and exchange options.")


def share_compression_profile(exchange, average):
    """Tensor selection decides from measured compression times; the workers
    average theirs (average(list of float) -> list of float, over workers), so
    that they all make the same decisions."""
    selection = exchange.selection
    if not selection:
        return
    local = selection.profile(exchange.compressor)
    shared = [float(s) for s in average(local.seconds)]
    selection.set_profile(exchange.compressor, CompressionProfile(local.sizes, shared))
    selection.mark_shared()
