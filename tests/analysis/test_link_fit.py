"""tfcomp.analysis.model.link_fit: a link's latency and bandwidth recovered from timed collectives."""
import pytest

from tfcomp.costs.network import ALLGATHER, ALLREDUCE, COLLECTIVE_COSTS, Link
from tfcomp.analysis.model.link_fit import fit_link
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SIZES = [4 ** e for e in range(5, 13)]


@pytest.mark.parametrize("collective", [ALLREDUCE, ALLGATHER])
@pytest.mark.parametrize("p", [2, 3, 16])
@pytest.mark.parametrize("link", [Link(50e-6, 1.25e8), Link(0.0, 1.25e9), Link(1e-3, 1.25e7)])
def test_fit_recovers_the_link_the_cost_model_timed(collective, p, link):
    samples = [(n, COLLECTIVE_COSTS[collective](n, p, link)) for n in SIZES]
    fitted, error = fit_link(samples, collective, p)
    assert fitted.alpha_s == pytest.approx(link.alpha_s, abs=1e-9)
    assert fitted.bandwidth_bytes_per_s == pytest.approx(link.bandwidth_bytes_per_s, rel=1e-6)
    assert error == pytest.approx(0.0, abs=1e-6)


def test_noise_shows_in_the_error():
    link = Link(1e-4, 1.25e8)
    samples = [(n, COLLECTIVE_COSTS[ALLREDUCE](n, 2, link) * (1.3 if i % 2 else 0.8)) for i, n in enumerate(SIZES)]
    fitted, error = fit_link(samples, ALLREDUCE, 2)
    assert 0.2 < error < 1.0
    assert fitted.bandwidth_bytes_per_s == pytest.approx(link.bandwidth_bytes_per_s, rel=0.4)


@pytest.mark.parametrize("samples, collective, p, message", [
    ([(1024, 1e-3)], ALLREDUCE, 2, "two sizes"),
    ([(1024, 1e-3), (1024, 2e-3)], ALLREDUCE, 2, "two sizes"),
    ([(1024, 1e-3), (4096, -1.0)], ALLREDUCE, 2, "positive times"),
    ([(1024, 2e-3), (4096, 1e-3)], ALLREDUCE, 2, "do not grow"),
    ([(1024, 1e-3), (4096, 2e-3)], "broadcast", 2, "collective must be"),
    ([(1024, 1e-3), (4096, 2e-3)], ALLREDUCE, 1, "two workers"),
])
def test_bad_samples_are_refused(samples, collective, p, message):
    with pytest.raises(ValueError, match=message):
        fit_link(samples, collective, p)


def test_messages_slower_than_larger_ones_are_left_out_of_the_fit():
    """Horovod held the small tensors of a probe on loopback for its fusion cycle (~10 ms, more
    than 256 KiB took): the fit keeps the lower envelope, where the time grows with the size."""
    held = [(1024, 0.00986), (4096, 0.00885), (16384, 0.01006), (65536, 0.00947)]
    transfers = [(262144, 0.00107), (1048576, 0.00252), (4194304, 0.00804)]
    fitted, _ = fit_link(held + transfers, ALLREDUCE, 2)
    alone, _ = fit_link(transfers, ALLREDUCE, 2)
    assert fitted == alone and fitted.bandwidth_bytes_per_s > 0
    with pytest.raises(ValueError, match="do not grow with the size"):
        fit_link([(1024, 0.002), (4096, 0.001)], ALLREDUCE, 2)  # nothing larger is faster: no envelope left
