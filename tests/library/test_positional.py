"""Sinusoidal positional encoding: the formula, parity, the layer, bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

FRAMEWORKS = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}


@settings(max_examples=10, deadline=None)
@given(p=st.integers(0, 1999), d_model=st.integers(1, 33), data=st.data())
def test_matches_the_formula(p, d_model, data):
    j = data.draw(st.integers(0, d_model - 1))
    pe = anp.sinusoidal_positional_encoding(p + 1, d_model)
    two_i = j - j % 2
    angle = p / 10000 ** (two_i / d_model)
    expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    assert pe[p, j] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("d_model", [1, 7, 8, 64])
def test_parity_long_tables(d_model):
    ref = anp.sinusoidal_positional_encoding(2000, d_model)
    assert ref.shape == (2000, d_model)
    for module, _ in FRAMEWORKS.values():
        got = module.sinusoidal_positional_encoding(2000, d_model)
        assert tuple(got.shape) == (2000, d_model)
        assert_close(got, ref)


def test_odd_d_model_ends_with_a_sine():
    pe = anp.sinusoidal_positional_encoding(5, 5)
    angle = np.arange(5) / 10000 ** (4 / 5)
    assert_close(pe[:, 4], np.sin(angle))
    even = anp.sinusoidal_positional_encoding(5, 4)
    # frequencies depend on d_model, so only the first pair coincides
    assert_close(pe[:, :2], even[:, :2])


def test_position_zero_and_bounds():
    pe = anp.sinusoidal_positional_encoding(50, 16)
    assert_close(pe[0, 0::2], np.zeros(8))
    assert_close(pe[0, 1::2], np.ones(8))
    assert np.all(np.abs(pe) <= 1)


def test_relative_positions_are_a_rotation():
    """PE[p + k] is a fixed rotation of PE[p] in every (sin, cos) pair."""
    d, k = 8, 3
    pe = anp.sinusoidal_positional_encoding(20, d)
    omega = 1 / 10000 ** (np.arange(0, d, 2) / d)
    for i, w in enumerate(omega):
        c, s = math.cos(k * w), math.sin(k * w)
        rot = np.array([[c, -s], [s, c]])  # acts on (sin, cos) row vectors
        pair = pe[:, 2 * i : 2 * i + 2]
        assert_close(pair[:-k] @ rot, pair[k:])


def test_layer_adds_the_table(rng):
    x = rng.normal(size=(2, 7, 6))
    ref = anp.PositionalEncoding(6, max_len=10)(x)
    assert_close(ref, x + anp.sinusoidal_positional_encoding(7, 6))
    for module, convert in FRAMEWORKS.values():
        assert_close(module.PositionalEncoding(6, max_len=10)(convert(x)), ref)


def test_torch_table_is_a_buffer_not_a_parameter():
    layer = atorch.PositionalEncoding(4, max_len=8)
    assert list(layer.parameters()) == []
    assert "table" not in layer.state_dict()


def _messages(make_call, x):
    out = []
    for module, convert in [(anp, np.asarray), *FRAMEWORKS.values()]:
        with pytest.raises(ValueError) as info:
            make_call(module)(convert(x))
        out.append(str(info.value))
    assert all(out[0] in m for m in out[1:]), out
    return out[0]


def test_sequence_longer_than_max_len(rng):
    msg = _messages(
        lambda m: m.PositionalEncoding(6, max_len=5), rng.normal(size=(1, 6, 6))
    )
    assert "sequence length 6 exceeds max_len=5" in msg


def test_wrong_feature_size(rng):
    msg = _messages(
        lambda m: m.PositionalEncoding(6, max_len=5), rng.normal(size=(1, 3, 4))
    )
    assert "d_model=6" in msg and "(1, 3, 4)" in msg
