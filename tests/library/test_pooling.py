"""Attention pooling: soft, scaled dot-product, key-value and hard attention."""

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse.checks import dtype_name

FW = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}
SETTINGS = settings(max_examples=25, deadline=None)


def maybe(conv, x):
    return None if x is None else conv(x)


@st.composite
def problems(draw):
    """queries, keys, values, an optional mask and optional valid_lens."""
    b, nq, nk = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
    )
    d, d_v = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, k = rng.normal(size=(b, nq, d)), rng.normal(size=(b, nk, d))
    v = rng.normal(size=(b, nk, d_v))
    mask_shape = draw(st.sampled_from([None, (b, nq, nk), (b, 1, nk), (nq, nk)]))
    mask = None if mask_shape is None else rng.random(mask_shape) < 0.7
    lens_shape = draw(st.sampled_from([None, (b,), (b, nq)]))
    lens = None if lens_shape is None else rng.integers(0, nk + 1, lens_shape)
    return q, k, v, mask, lens


@SETTINGS
@given(problems())
def test_soft_attention_parity(problem):
    q, k, v, mask, _ = problem
    scores = anp.dot_score(q, k)
    ref_out, ref_w = anp.soft_attention(scores, v, mask)
    np.testing.assert_allclose(ref_out, ref_w @ v)
    for mod, conv in FW.values():
        out, w = mod.soft_attention(conv(scores), conv(v), maybe(conv, mask))
        assert_close(out, ref_out, what=mod.__name__)
        assert_close(w, ref_w, what=mod.__name__)


@SETTINGS
@given(problems(), st.sampled_from([None, 0.5, 2.0]))
def test_scaled_dot_product_attention_parity(problem, scale):
    q, k, v, mask, lens = problem
    ref_out, ref_w = anp.scaled_dot_product_attention(q, k, v, mask, lens, scale)
    for mod, conv in FW.values():
        out, w = mod.scaled_dot_product_attention(
            conv(q), conv(k), conv(v), maybe(conv, mask), maybe(conv, lens), scale
        )
        assert_close(out, ref_out, what=mod.__name__)
        assert_close(w, ref_w, what=mod.__name__)


def test_sdpa_reference_by_hand(rng):
    """softmax(q k^T / sqrt(d)) v with the masks ANDed, written out."""
    q, k, v = (
        rng.normal(size=(2, 3, 4)),
        rng.normal(size=(2, 5, 4)),
        rng.normal(size=(2, 5, 2)),
    )
    mask = anp.causal_mask(3, 5)
    lens = np.array([5, 2])
    scores = q @ k.transpose(0, 2, 1) / 2.0
    keep = mask & (np.arange(5) < lens[:, None, None])
    e = np.where(keep, np.exp(scores - scores.max(-1, keepdims=True)), 0)
    w = e / e.sum(-1, keepdims=True)
    out, got_w = anp.scaled_dot_product_attention(q, k, v, mask, lens)
    np.testing.assert_allclose(got_w, w)
    np.testing.assert_allclose(out, w @ v)


def _additive_fn(mod, conv, ws):
    w = [conv(x) for x in ws]
    return lambda q, k: mod.additive_score(q, k, *w)


@SETTINGS
@given(problems(), st.integers(0, 1000))
def test_key_value_attention_parity(problem, seed):
    q, k, v, mask, lens = problem
    rng = np.random.default_rng(seed)
    ws = [
        rng.normal(size=(q.shape[-1], 3)),
        rng.normal(size=(k.shape[-1], 3)),
        rng.normal(size=3),
    ]
    ref = anp.key_value_attention(
        q, k, v, _additive_fn(anp, np.asarray, ws), mask, lens
    )
    for mod, conv in FW.values():
        got = mod.key_value_attention(
            conv(q),
            conv(k),
            conv(v),
            _additive_fn(mod, conv, ws),
            maybe(conv, mask),
            maybe(conv, lens),
        )
        for g, r in zip(got, ref, strict=True):
            assert_close(g, r, what=mod.__name__)


def test_key_value_attention_normal_mode_is_sdpa(rng):
    """keys = values = X with the scaled dot score is plain self-attention."""
    q, x = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 6, 4))
    got = anp.key_value_attention(q, x, x, anp.scaled_dot_score)
    ref = anp.scaled_dot_product_attention(q, x, x)
    np.testing.assert_allclose(got[0], ref[0])


@pytest.mark.parametrize("fw", ["numpy", *FW])
def test_fully_masked_query_gives_zero_output(fw, rng):
    mod, conv = (anp, np.asarray) if fw == "numpy" else FW[fw]
    q, k, v = (
        rng.normal(size=(2, 3, 4)),
        rng.normal(size=(2, 5, 4)),
        rng.normal(size=(2, 5, 2)),
    )
    out, w = mod.scaled_dot_product_attention(
        conv(q), conv(k), conv(v), valid_lens=conv(np.array([5, 0]))
    )
    assert np.all(to_np(out)[1] == 0) and np.all(to_np(w)[1] == 0)
    assert np.all(np.isfinite(to_np(out)))


# --- gradients --------------------------------------------------------------


def _grads_tf(fn, arrays, cots):
    xs = [to_tf(a) for a in arrays]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = sum(
            tf.reduce_sum(y * to_tf(c)) for y, c in zip(fn(*xs), cots, strict=True)
        )
    return [to_np(g) for g in tape.gradient(loss, xs)]


def _grads_torch(fn, arrays, cots):
    xs = [to_torch(a).requires_grad_() for a in arrays]
    sum((y * to_torch(c)).sum() for y, c in zip(fn(*xs), cots, strict=True)).backward()
    return [to_np(x.grad) for x in xs]


@SETTINGS
@given(problems())
def test_sdpa_gradients_agree(problem):
    q, k, v, mask, lens = problem
    rng = np.random.default_rng(3)
    cots = [
        rng.normal(size=(q.shape[0], q.shape[1], v.shape[2])),
        rng.normal(size=(q.shape[0], q.shape[1], k.shape[1])),
    ]

    def make(mod, conv):
        return lambda a, b, c: mod.scaled_dot_product_attention(
            a, b, c, maybe(conv, mask), maybe(conv, lens)
        )

    g_tf = _grads_tf(make(atf, to_tf), [q, k, v], cots)
    g_pt = _grads_torch(make(atorch, to_torch), [q, k, v], cots)
    for name, a, b in zip("qkv", g_tf, g_pt, strict=True):
        assert np.all(np.isfinite(a))
        assert_close(a, b, what=f"grad wrt {name}")


# --- hard attention ---------------------------------------------------------


def _weights(rng, b=2, nq=3, nk=5, d_v=4, zero_row=True):
    w = anp.masked_softmax(
        rng.normal(scale=2, size=(b, nq, nk)), rng.random((b, nq, nk)) < 0.7
    )
    if zero_row:
        w[0, 0] = 0.0  # a fully masked query
    return w, rng.normal(size=(b, nk, d_v))


@pytest.mark.parametrize("seed", range(5))
def test_hard_attention_argmax_parity(seed):
    w, v = _weights(np.random.default_rng(seed))
    ref_out, ref_idx, ref_lp = anp.hard_attention(w, v)
    assert ref_idx.dtype == np.int64 and ref_idx.shape == w.shape[:2]
    valid = w.sum(-1) > 0
    np.testing.assert_array_equal(ref_idx[valid], w.argmax(-1)[valid])
    chosen = np.take_along_axis(v, ref_idx[..., None], axis=1)
    np.testing.assert_allclose(ref_out[valid], chosen[valid])
    np.testing.assert_array_equal(ref_out[~valid], 0.0)
    np.testing.assert_allclose(ref_lp[valid], np.log(w.max(-1)[valid]))
    np.testing.assert_array_equal(ref_lp[~valid], 0.0)
    for mod, conv in FW.values():
        out, idx, lp = mod.hard_attention(conv(w), conv(v), "argmax")
        assert dtype_name(idx) == "int64"
        np.testing.assert_array_equal(to_np(idx), ref_idx)
        assert_close(out, ref_out)
        assert_close(lp, ref_lp)


GENERATORS = {
    "numpy": (anp, np.asarray, lambda s: np.random.default_rng(s)),
    "tf": (atf, to_tf, lambda s: tf.random.Generator.from_seed(s)),
    "torch": (atorch, to_torch, lambda s: torch.Generator().manual_seed(s)),
}


@pytest.mark.parametrize("fw", GENERATORS)
def test_hard_attention_sampling_follows_weights(fw):
    mod, conv, make_gen = GENERATORS[fw]
    w = np.array([[[0.1, 0.0, 0.6, 0.3]]])
    n = 4000
    ws, v = np.repeat(w, n, axis=0), np.tile(np.eye(4)[None], (n, 1, 1))
    out, idx, lp = mod.hard_attention(conv(ws), conv(v), "sample", make_gen(0))
    idx = to_np(idx)[:, 0]
    freq = np.bincount(idx, minlength=4) / n
    assert freq[1] == 0  # a zero weight is never sampled
    np.testing.assert_allclose(freq, w[0, 0], atol=0.03)
    np.testing.assert_allclose(to_np(out)[:, 0], np.eye(4)[idx], atol=1e-6)
    np.testing.assert_allclose(to_np(lp)[:, 0], np.log(w[0, 0, idx]), rtol=1e-5)
    _, idx2, _ = mod.hard_attention(conv(ws), conv(v), "sample", make_gen(0))
    np.testing.assert_array_equal(to_np(idx2)[:, 0], idx)  # reproducible


def test_hard_attention_log_prob_gradients_agree(rng):
    w, v = _weights(rng)
    cot = rng.normal(size=w.shape[:2])
    g_tf = _grads_tf(lambda a: atf.hard_attention(a, to_tf(v))[2:], [w], [cot])
    g_pt = _grads_torch(lambda a: atorch.hard_attention(a, to_torch(v))[2:], [w], [cot])
    assert_close(g_tf[0], g_pt[0])
    # d log w_j / d w_j = 1 / w_j at the chosen key, 0 elsewhere and in zero rows
    idx = w.argmax(-1)
    expected = np.zeros_like(w)
    valid = w.sum(-1) > 0
    for b, i in zip(*np.nonzero(valid), strict=True):
        expected[b, i, idx[b, i]] = cot[b, i] / w[b, i, idx[b, i]]
    assert_close(g_tf[0], expected, rtol=1e-4)


def test_hard_attention_outputs_carry_no_gradient_to_weights(rng):
    w, v = _weights(rng, zero_row=False)
    wt = to_torch(w).requires_grad_()
    out, _, lp = atorch.hard_attention(wt, to_torch(v), "argmax")
    assert not out.requires_grad and lp.requires_grad
    wtf = tf.Variable(to_tf(w))
    with tf.GradientTape(persistent=True) as tape:
        out, _, lp = atf.hard_attention(wtf, to_tf(v), "argmax")
        out_sum, lp_sum = tf.reduce_sum(out), tf.reduce_sum(lp)
    assert tape.gradient(out_sum, wtf) is None
    assert tape.gradient(lp_sum, wtf) is not None
