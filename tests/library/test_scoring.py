"""Score functions: NumPy reference facts, TF/PyTorch parity and gradients."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch


def to_tf0(x):
    """to_tf keeping 0-d arrays 0-d (conftest's converters go through
    np.ascontiguousarray, which turns a scalar into shape (1,))."""
    return tf.reshape(to_tf(x), np.shape(x))


def to_torch0(x):
    return to_torch(x).reshape(np.shape(x))


FW = {"tf": (atf, to_tf0), "torch": (atorch, to_torch0)}
SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def problems(draw):
    """(queries, keys, weights-by-score-name) with small random shapes."""
    b, nq, nk = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
    )
    d_q, d_k, h = (
        draw(st.integers(1, 6)),
        draw(st.integers(1, 6)),
        draw(st.integers(1, 5)),
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, k = rng.normal(size=(b, nq, d_q)), rng.normal(size=(b, nk, d_k))
    k_same = rng.normal(size=(b, nk, d_q))
    return (
        q,
        k,
        k_same,
        {
            "additive": [
                rng.normal(size=(d_q, h)),
                rng.normal(size=(d_k, h)),
                rng.normal(size=h),
            ],
            "concat": [rng.normal(size=d_q + d_k), rng.normal()],
            "bilinear": [rng.normal(size=(d_q, d_k))],
        },
    )


def cases(q, k, k_same, w):
    """(name, inputs) for every score function; dot-type ones need d_q == d_k."""
    return {
        "dot_score": [q, k_same],
        "scaled_dot_score": [q, k_same],
        "cosine_score": [q, k_same],
        "additive_score": [q, k, *w["additive"]],
        "concat_score": [q, k, *w["concat"]],
        "bilinear_score": [q, k, *w["bilinear"]],
    }


@SETTINGS
@given(problems())
def test_scores_parity(problem):
    for name, args in cases(*problem).items():
        ref = getattr(anp, name)(*args)
        assert ref.shape == (args[0].shape[0], args[0].shape[1], args[1].shape[1])
        for mod, conv in FW.values():
            got = getattr(mod, name)(*[conv(a) for a in args])
            assert_close(got, ref, what=f"{mod.__name__}.{name}")


def _grads_tf(fn, arrays, cot):
    xs = [to_tf0(a) for a in arrays]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.reduce_sum(fn(*xs) * to_tf(cot))
    return [to_np(g) for g in tape.gradient(loss, xs)]


def _grads_torch(fn, arrays, cot):
    xs = [to_torch0(a).requires_grad_() for a in arrays]
    (fn(*xs) * to_torch(cot)).sum().backward()
    return [to_np(x.grad) for x in xs]


@SETTINGS
@given(problems())
def test_score_gradients_agree(problem):
    """d(sum(scores * c)) / d(queries, keys, weights): TF tape == torch autograd."""
    for name, args in cases(*problem).items():
        args = [np.asarray(a) for a in args]
        cot = np.random.default_rng(7).normal(
            size=(args[0].shape[0], args[0].shape[1], args[1].shape[1])
        )
        g_tf = _grads_tf(getattr(atf, name), args, cot)
        g_pt = _grads_torch(getattr(atorch, name), args, cot)
        # Cosine's gradient (|q|^2 - q q^T) / |q|^3 cancels catastrophically in
        # float32 (in one dimension it is exactly 0): allow 1e-4 there.
        atol = 1e-4 if name == "cosine_score" else 1e-5
        for i, (a, b) in enumerate(zip(g_tf, g_pt, strict=True)):
            assert_close(a, b, atol=atol, what=f"{name} grad of argument {i}")


def test_scaled_is_dot_over_sqrt_dk(rng):
    q, k = rng.normal(size=(2, 3, 16)), rng.normal(size=(2, 4, 16))
    np.testing.assert_allclose(anp.scaled_dot_score(q, k), anp.dot_score(q, k) / 4)


def test_additive_equals_concat_linear_tanh_sum(rng):
    """Rule 2 -- concat, linear, tanh, sum -- is additive_score with w_v = 1."""
    q, k = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 6))
    W_q, W_k = rng.normal(size=(4, 7)), rng.normal(size=(6, 7))
    W = np.concatenate([W_q, W_k])  # Linear on [q; k]: (d_q + d_k, h)
    qq = np.broadcast_to(q[:, :, None, :], (2, 3, 5, 4))
    kk = np.broadcast_to(k[:, None, :, :], (2, 3, 5, 6))
    pairs = np.concatenate([qq, kk], axis=-1)  # (b, nq, nk, d_q + d_k)
    rule2 = np.tanh(pairs @ W).sum(-1)
    np.testing.assert_allclose(anp.additive_score(q, k, W_q, W_k, np.ones(7)), rule2)


def test_concat_score_weights_ignore_the_query(rng):
    """Linear score of [q; k]: the query term is constant per row, softmax drops it."""
    q, k = rng.normal(size=(1, 4, 3)), rng.normal(size=(1, 5, 2))
    w = rng.normal(size=5)
    weights = anp.masked_softmax(anp.concat_score(q, k, w, 0.7))
    np.testing.assert_allclose(weights, np.broadcast_to(weights[:, :1], weights.shape))


def test_bilinear_with_identity_is_dot(rng):
    q, k = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 4, 5))
    np.testing.assert_allclose(anp.bilinear_score(q, k, np.eye(5)), anp.dot_score(q, k))


@pytest.mark.parametrize("fw", ["numpy", *FW])
def test_cosine_bounds_and_zero_vector(fw, rng):
    mod, conv = (anp, np.asarray) if fw == "numpy" else FW[fw]
    q = rng.normal(size=(1, 3, 4))
    q[0, 0] = 0.0
    k = np.concatenate([2.5 * q[:, 1:2], rng.normal(size=(1, 2, 4))], axis=1)
    s = to_np(mod.cosine_score(conv(q), conv(k)))
    assert np.all(np.abs(s) <= 1 + 1e-6)
    np.testing.assert_array_equal(s[0, 0], 0.0)  # zero query: score 0, no NaN
    np.testing.assert_allclose(s[0, 1, 0], 1.0, rtol=1e-6)  # parallel vectors


def test_cosine_gradient_finite_at_zero_vector():
    q = np.zeros((1, 1, 3))
    k = np.ones((1, 2, 3))
    cot = np.ones((1, 1, 2))
    for g in _grads_tf(atf.cosine_score, [q, k], cot) + _grads_torch(
        atorch.cosine_score, [q, k], cot
    ):
        assert np.all(np.isfinite(g))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_computes_in_input_dtype(dtype, rng):
    q = rng.normal(size=(1, 2, 3)).astype(dtype)
    k = rng.normal(size=(1, 4, 3)).astype(dtype)
    assert anp.scaled_dot_score(q, k).dtype == dtype
    assert anp.bilinear_score(q, k, rng.normal(size=(3, 3))).dtype == dtype
    assert anp.concat_score(q, k, rng.normal(size=6), 1.0).dtype == dtype
