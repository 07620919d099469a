"""Properties of attention that hold for every input (hypothesis-driven)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

ALL = {"numpy": (anp, np.asarray), "tf": (atf, to_tf), "torch": (atorch, to_torch)}
SETTINGS = settings(max_examples=30, deadline=None)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def masked_scores(draw):
    b, nq, nk = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 6)),
    )
    spread = draw(st.sampled_from([0.1, 1.0, 10.0, 100.0]))  # up to saturation
    rng = np.random.default_rng(draw(seeds))
    scores = rng.normal(scale=spread, size=(b, nq, nk))
    return scores, rng.random((b, nq, nk)) < draw(st.sampled_from([0.2, 0.6, 1.0]))


@pytest.mark.parametrize("fw", ALL)
@SETTINGS
@given(data=masked_scores())
def test_weights_are_a_distribution_over_unmasked_keys(fw, data):
    scores, mask = data
    mod, conv = ALL[fw]
    w = to_np(mod.masked_softmax(conv(scores), conv(mask)))
    assert np.all(w >= 0) and np.all(np.isfinite(w))
    assert np.all(w[~mask] == 0)  # exactly zero, not merely small
    rows = mask.any(-1)
    np.testing.assert_allclose(w.sum(-1)[rows], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(w.sum(-1)[~rows], 0.0)


@pytest.mark.parametrize("fw", ALL)
@SETTINGS
@given(data=masked_scores(), seed=seeds)
def test_outputs_are_convex_combinations_of_values(fw, data, seed):
    scores, mask = data
    mask[..., 0] = True
    mod, conv = ALL[fw]
    v = np.random.default_rng(seed).normal(size=(scores.shape[0], scores.shape[2], 3))
    out = to_np(mod.soft_attention(conv(scores), conv(v), conv(mask))[0])
    lo, hi = v.min(1, keepdims=True), v.max(1, keepdims=True)
    assert np.all(out >= lo - 1e-5) and np.all(out <= hi + 1e-5)


def _self_attention(fw, x, seed, mask=None):
    """SelfAttention of framework ``fw`` with the NumPy layer's weights."""
    mod, conv = ALL[fw]
    ref = anp.SelfAttention(3, 2, x.shape[-1], seed=seed)
    layer = ref if fw == "numpy" else mod.SelfAttention(3, 2, x.shape[-1])
    mod.set_params(layer, anp.get_params(ref))
    return to_np(layer(conv(x), attention_mask=None if mask is None else conv(mask)))


@pytest.mark.parametrize("fw", ALL)
@SETTINGS
@given(n=st.integers(1, 7), seed=seeds)
def test_self_attention_is_permutation_equivariant(fw, n, seed):
    """No positional encoding: permuting the tokens permutes the outputs."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, n, 4))
    perm = rng.permutation(n)
    out = _self_attention(fw, x, seed % 1000)
    out_perm = _self_attention(fw, x[:, perm], seed % 1000)
    assert_close(out_perm, out[:, perm])


@pytest.mark.parametrize("fw", ALL)
@SETTINGS
@given(n=st.integers(1, 5), pad=st.integers(1, 4), seed=seeds)
def test_masked_padding_changes_nothing(fw, n, pad, seed):
    """Extra keys that are masked out leave the real positions' outputs alone."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, n, 4))
    padded = np.concatenate([x, rng.normal(scale=10, size=(2, pad, 4))], axis=1)
    key_mask = np.arange(n + pad)[None, None, :] < n  # (1, 1, n + pad)
    out = _self_attention(fw, x, seed % 1000)
    out_padded = _self_attention(fw, padded, seed % 1000, key_mask)
    assert_close(out_padded[:, :n], out)
    # and with valid_lens in the pooling function
    mod, conv = ALL[fw]
    q, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, n + pad, 2))
    full = mod.scaled_dot_product_attention(
        conv(q), conv(padded), conv(v), valid_lens=conv(np.array([n, n]))
    )[0]
    short = mod.scaled_dot_product_attention(conv(q), conv(x), conv(v[:, :n]))[0]
    assert_close(full, short)


@pytest.mark.parametrize("fw", ALL)
@pytest.mark.parametrize("d_k", [16, 64, 256])
@settings(max_examples=3, deadline=None)
@given(seed=seeds)
def test_scaling_keeps_score_variance_at_one(fw, d_k, seed):
    """q, k iid N(0, 1): Var(q . k) = d_k; dividing by sqrt(d_k) makes it 1."""
    mod, conv = ALL[fw]
    rng = np.random.default_rng(seed)
    n = 20_000  # independent (q, k) pairs
    q, k = rng.normal(size=(n, 1, d_k)), rng.normal(size=(n, 1, d_k))
    scaled = to_np(mod.scaled_dot_score(conv(q), conv(k)))
    unscaled = to_np(mod.dot_score(conv(q), conv(k)))
    assert abs(scaled.var() - 1) < 0.1
    assert abs(unscaled.var() / d_k - 1) < 0.1
