"""How the exchange groups payloads into fusion buckets, without TensorFlow, so the
analysis tools (tfcomp.analysis) replay the same policy the library runs."""


def buckets(sizes, cap_bytes):
    """Consecutive index groups whose sizes add up to at most cap_bytes (a larger one stands alone)."""
    groups, current, total = [], [], 0
    for i, nbytes in enumerate(sizes):
        if current and total + nbytes > cap_bytes:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += nbytes
    if current:
        groups.append(current)
    return groups


DEFAULT_BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's and the ACP-SGD paper's bucket
