"""One meaning per name: a bare compressor name is the compressor at its defaults
everywhere (Python, specs, reprs), knobs take the same names in Python and in specs,
and every repr constructs the compressor it describes."""
import hypothesis.strategies as st
import pytest
from hypothesis import given

import tfcomp
from tfcomp.compressors import registry
from tfcomp.compressors.base import EPOCH
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

NAMESPACE = {name: getattr(tfcomp, name) for name in registry.COMPRESSORS}

# Knobs a user changes, per family, with values each constructor accepts.
SPARSE_KNOBS = {"ratio": st.sampled_from([0.001, 0.01, 0.05, 0.1, 0.5]),
                "momentum": st.sampled_from(["auto", None, 0.0, 0.9]),
                "momentum_masking": st.sampled_from([0.0, 0.5, 1.0]),
                "warmup_steps": st.sampled_from([EPOCH, 0, 7])}
LOW_RANK_KNOBS = {"rank": st.integers(1, 16), "use_error_feedback": st.booleans(),
                  "min_compression_rate": st.sampled_from([1.0, 2.0, 3.5]),
                  "momentum": st.sampled_from([None, 0.9]), "warmup_steps": st.sampled_from([EPOCH, 0, 100])}
FAMILIES = [(cls, SPARSE_KNOBS) for cls in (tfcomp.TopK, tfcomp.RandomK, tfcomp.DGC, tfcomp.DRAGONN)] + [
    (cls, LOW_RANK_KNOBS) for cls in (tfcomp.PowerSGD, tfcomp.ACPSGD)]


@st.composite
def compressors(draw):
    cls, knobs = draw(st.sampled_from(FAMILIES))
    chosen = draw(st.lists(st.sampled_from(sorted(knobs)), unique=True))
    return cls(**{k: draw(knobs[k]) for k in chosen})


@pytest.mark.parametrize("name", list(registry.COMPRESSORS))
def test_a_bare_name_is_the_compressor_at_its_defaults_everywhere(name):
    cls = registry.COMPRESSORS[name]
    bare = cls()
    assert registry.resolve(cls).config() == bare.config()
    assert registry.parse_compressor(name).config() == bare.config()
    assert registry.spec(bare) == name and registry.short_repr(bare) == f"{name}()"
    assert eval(repr(bare), NAMESPACE).config() == bare.config()  # pylint: disable=eval-used


def test_the_defaults_are_the_settings_that_trained_like_dense():
    for cls in (tfcomp.TopK, tfcomp.RandomK, tfcomp.DGC, tfcomp.DRAGONN):
        assert cls().ratio == 0.1 and cls().warmup_steps == EPOCH
    assert tfcomp.PowerSGD().matrix_approximation_rank == 4 and tfcomp.PowerSGD().warmup_steps == EPOCH
    assert tfcomp.ACPSGD().matrix_approximation_rank == 8 and tfcomp.ACPSGD().warmup_steps == EPOCH
    for cls in (tfcomp.FP16, tfcomp.SignSGD, tfcomp.EFSignSGD, tfcomp.NoCompression):
        assert cls().warmup_steps == 0


@given(compressors())
def test_every_repr_and_spec_constructs_the_compressor_it_names(compressor):
    assert eval(repr(compressor), NAMESPACE).config() == compressor.config()  # pylint: disable=eval-used
    assert eval(registry.short_repr(compressor), NAMESPACE).config() == compressor.config()  # pylint: disable=eval-used
    assert registry.parse_compressor(registry.spec(compressor)).config() == compressor.config()


@pytest.mark.parametrize("python, spec", [
    (lambda: tfcomp.PowerSGD(rank=2), "PowerSGD:rank=2"),
    (lambda: tfcomp.ACPSGD(rank=4, warmup_steps=0), "ACPSGD:rank=4:warmup_steps=0"),
    (lambda: tfcomp.PowerSGD(start_powerSGD_iter=10), "PowerSGD:start_powerSGD_iter=10"),
    (lambda: tfcomp.DGC(ratio=0.01, momentum=None), "DGC:ratio=0.01:momentum=None"),
])
def test_python_keywords_and_spec_knobs_share_their_names(python, spec):
    assert python().config() == registry.parse_compressor(spec).config()


def test_a_knob_given_twice_or_unknown_is_refused():
    with pytest.raises(TypeError, match="rank= is matrix_approximation_rank="):
        tfcomp.PowerSGD(rank=2, matrix_approximation_rank=2)
    with pytest.raises(ValueError, match="'DGC:rank=2'"):
        registry.parse_compressor("DGC:rank=2")
    with pytest.raises(ValueError, match="warmup_steps is the dense steps"):
        tfcomp.TopK(warmup_steps=-1)
