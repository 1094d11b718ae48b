"""tfcomp.Auto's trials: configurations timed in interleaved blocks, and each one's
speed against dense from the same rounds.

Timed one after the other, two configurations see different load on a shared
machine: three 20-step medians of the same dense configuration (xml, Horovod,
loopback) measured 38.6, 45.5 and 47.0 ms. So every configuration runs a block in
each of `rounds` rounds, dense first and the order reversed every other round (each
round starts with the configuration the last one ended on, so it needs no switch),
and a configuration's speed is the median over rounds of its block's median step
time over dense's block median of the same round. An audit (Auto's audit_steps) times
the configuration kept against every alternative the same way, and regret() says how
far the kept one is from the fastest.
"""
import dataclasses
import statistics

SETTLE_STEPS = 1  # untimed steps after a switch to a train function traced before


@dataclasses.dataclass
class Block:
    config: int  # which configuration runs (an index into the trials' configurations)
    round: int
    steps: int  # how many of its steps are timed
    times: list = dataclasses.field(default_factory=list)


def schedule(num_configs, dense, check_steps, rounds):
    """The blocks in the order they run. dense: the index of the dense configuration,
    or None where there is none to pair with (a run resumed in its trials)."""
    if not 1 <= rounds <= check_steps:
        raise ValueError(f"rounds must be in [1, check_steps={check_steps}], got {rounds}")
    order = list(range(num_configs))
    if dense is not None:
        order.remove(dense)
        order.insert(0, dense)
    sizes = [check_steps // rounds + (1 if r < check_steps % rounds else 0) for r in range(rounds)]
    return [Block(i, r, sizes[r]) for r in range(rounds) for i in (order if r % 2 == 0 else order[::-1])]


def verdict(num_configs, blocks, block_ms, dense, reference_ms=None):
    """[{"ms", "vs_dense"}] per configuration, from each block's median step time
    (block_ms, in the blocks' order, already averaged over the workers): ms is the
    median of its blocks, vs_dense the median over rounds of its block over dense's
    block of that round (without a dense configuration: ms over reference_ms)."""
    if len(block_ms) != len(blocks):
        raise ValueError(f"{len(block_ms)} block times for {len(blocks)} blocks")
    if dense is None and not reference_ms:
        raise ValueError("without a dense configuration, give the dense reference_ms")
    by_round = {(b.round, b.config): ms for b, ms in zip(blocks, block_ms)}
    rounds = sorted({b.round for b in blocks})
    results = []
    for i in range(num_configs):
        mine = [by_round[(r, i)] for r in rounds]
        ratios = [m / reference_ms for m in mine] if dense is None else \
            [m / by_round[(r, dense)] for r, m in zip(rounds, mine)]
        results.append({"ms": statistics.median(mine), "vs_dense": statistics.median(ratios)})
    return results


def regret(results, kept):
    """How the configuration kept (an index into verdict's results) measured against
    the fastest: {"fastest": its index, "vs_dense": the kept one's, "regret": the kept
    one's speed against dense over the fastest's, minus 1 (0 where it is the fastest)}."""
    fastest = min(range(len(results)), key=lambda i: results[i]["vs_dense"])
    return {"fastest": fastest, "vs_dense": results[kept]["vs_dense"],
            "regret": results[kept]["vs_dense"] / results[fastest]["vs_dense"] - 1}
