"""Sliding-window and linear attention (attncourse.*.sparse): the band equals
scaled_dot_product_attention with sliding_window_mask, linear attention equals
its quadratic form and a loop of linear_attention_step, NumPy == TF == torch,
TF == torch gradients (and torch's gradcheck in float64), the NumPy band's
memory grows as n * window, and clear errors for bad input."""

import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
import torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from tests.support.arrays import ATOL, RTOL, to_np, to_tf, to_torch

FRAMEWORKS = [(anp, np.asarray), (atf, to_tf), (atorch, to_torch)]
IDS = ["numpy", "tf", "torch"]
EPS = 1e-6


def _qkv(rng, b=2, n=9, d=4, d_v=3, nk=None):
    nk = n if nk is None else nk
    return (
        rng.normal(size=(b, n, d)),
        rng.normal(size=(b, nk, d)),
        rng.normal(size=(b, nk, d_v)),
    )


def _quadratic(q, k, v, causal, phi=anp.elu_feature_map):
    """(A @ V) / (A.sum(-1) + eps), A = phi(Q) phi(K)^T (causal: masked)."""
    a = phi(q) @ np.swapaxes(phi(k), 1, 2)  # (b, nq, nk)
    if causal:
        a = a * anp.causal_mask(q.shape[1], k.shape[1])
    return (a @ v) / (a.sum(-1, keepdims=True) + EPS)


def _wide_features(x):
    """A feature map with r = 2 d features: [elu(x) + 1, exp(-x)]."""
    if isinstance(x, np.ndarray):
        return np.concatenate([anp.elu_feature_map(x), np.exp(-x)], -1)
    if isinstance(x, torch.Tensor):
        return torch.cat([atorch.elu_feature_map(x), torch.exp(-x)], -1)
    return tf.concat([atf.elu_feature_map(x), tf.exp(-x)], -1)


# --- the mask ----------------------------------------------------------------


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_mask_is_the_definition(mod, conv, causal):
    for nq, nk, window in [(6, 6, 1), (6, 6, 3), (6, 6, 6), (4, 7, 2)]:
        got = to_np(mod.sliding_window_mask(nq, window, nk, causal=causal))
        i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
        want = (i - window < j) & (j <= i) if causal else np.abs(i - j) < window
        assert got.dtype == bool and got.shape == (nq, nk)
        np.testing.assert_array_equal(got, want)
    full = to_np(mod.sliding_window_mask(5, 5))  # window = n: the causal mask
    np.testing.assert_array_equal(full, anp.causal_mask(5))
    assert to_np(mod.sliding_window_mask(5, 5, causal=False)).all()


# --- the band ----------------------------------------------------------------


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n, window", [(1, 1), (9, 1), (9, 4), (9, 9), (16, 5)])
def test_band_equals_masked_attention(rng, mod, conv, causal, n, window):
    q, k, v = _qkv(rng, n=n)
    mask = anp.sliding_window_mask(n, window, causal=causal)
    want, dense = anp.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.7)
    out, band = mod.sliding_window_attention(
        conv(q), conv(k), conv(v), window, causal=causal, scale=0.7
    )
    width = window if causal else 2 * window - 1
    assert tuple(band.shape) == (2, n, width)
    tol = {"atol": 1e-12} if mod is anp else {"atol": ATOL, "rtol": RTOL}
    np.testing.assert_allclose(to_np(out), want, **tol)
    # band[:, i, w] is the weight of key i - window + 1 + w (0 if none)
    keys = np.arange(n)[:, None] - window + 1 + np.arange(width)
    real = (keys >= 0) & (keys < n)
    rows = np.broadcast_to(np.arange(n)[:, None], keys.shape)
    expected = np.where(real, dense[:, rows, np.clip(keys, 0, n - 1)], 0.0)
    np.testing.assert_allclose(to_np(band), expected, **tol)


def test_band_default_scale_is_one_over_sqrt_d(rng):
    q, k, v = _qkv(rng, n=7, d=5)
    mask = anp.sliding_window_mask(7, 3)
    want, _ = anp.scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(anp.sliding_window_attention(q, k, v, 3)[0], want)


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("causal", [True, False])
def test_numpy_band_memory_grows_as_n_times_window(rng, causal):
    """n = 4096, window 16: the peak is a few (n, window) arrays, far below
    one (n, n) float64 table, and doubling n doubles it (no n^2 term)."""
    peaks = {}
    for n in (2048, 4096):
        q, k, v = _qkv(rng, b=1, n=n, d=8, d_v=8)
        peaks[n] = _peak_bytes(
            lambda q=q, k=k, v=v: anp.sliding_window_attention(
                q, k, v, 16, causal=causal
            )
        )
    table = 4096 * 4096 * 8
    assert peaks[4096] < table / 16, (peaks, table)
    assert peaks[4096] < 2.3 * peaks[2048], peaks


def test_numpy_linear_attention_memory_is_linear_in_n(rng):
    peaks = {}
    for n in (2048, 4096):
        q, k, v = _qkv(rng, b=1, n=n, d=8, d_v=8)
        peaks[n] = _peak_bytes(lambda q=q, k=k, v=v: anp.linear_attention(q, k, v))
    assert peaks[4096] < 4096 * 4096 * 8 / 64, peaks
    assert peaks[4096] < 2.3 * peaks[2048], peaks


# --- linear attention --------------------------------------------------------


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_equals_its_quadratic_form(rng, mod, conv, causal):
    nk = None if causal else 6  # non-causal: any number of keys
    q, k, v = _qkv(rng, n=9, nk=nk)
    want = _quadratic(q, k, v, causal)
    got = mod.linear_attention(conv(q), conv(k), conv(v), causal=causal)
    tol = {"atol": 1e-12} if mod is anp else {"atol": ATOL, "rtol": RTOL}
    np.testing.assert_allclose(to_np(got), want, **tol)
    # another feature map, with r = 2 d features
    want = _quadratic(q, k, v, causal, _wide_features)
    got = mod.linear_attention(
        conv(q), conv(k), conv(v), causal=causal, feature_map=_wide_features
    )
    np.testing.assert_allclose(to_np(got), want, **tol)


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
@pytest.mark.parametrize("phi", [None, _wide_features], ids=["elu", "wide"])
def test_a_loop_of_steps_is_causal_linear_attention(rng, mod, conv, phi):
    q, k, v = _qkv(rng, n=8)
    want = anp.linear_attention(q, k, v, causal=True, feature_map=phi)
    state = normaliser = None
    outputs = []
    for t in range(8):
        out, state, normaliser = mod.linear_attention_step(
            state, normaliser, conv(q[:, t]), conv(k[:, t]), conv(v[:, t]), phi
        )
        outputs.append(to_np(out))
    r = 4 if phi is None else 8
    assert tuple(state.shape) == (2, r, 3) and tuple(normaliser.shape) == (2, r)
    tol = {"atol": 1e-12} if mod is anp else {"atol": ATOL, "rtol": RTOL}
    np.testing.assert_allclose(np.stack(outputs, 1), want, **tol)
    # the state is the sum of the outer products phi(k_j) v_j^T so far
    features = anp.elu_feature_map(k) if phi is None else phi(k)
    np.testing.assert_allclose(
        to_np(state), np.einsum("bnr,bne->bre", features, v), **tol
    )
    np.testing.assert_allclose(to_np(normaliser), features.sum(1), **tol)


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
def test_elu_feature_map_is_positive_elu_plus_one(mod, conv):
    x = np.linspace(-30, 5, 71)
    got = to_np(mod.elu_feature_map(conv(x)))
    want = np.where(x > 0, x + 1, np.exp(x))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    assert (got > 0).all()


# --- gradients ---------------------------------------------------------------


CASES = [
    ("window", {"window": 3, "causal": True}),
    ("window", {"window": 3, "causal": False}),
    ("linear", {"causal": True}),
    ("linear", {"causal": False}),
]


def _call(mod, kind, q, k, v, kw):
    if kind == "window":
        return mod.sliding_window_attention(q, k, v, **kw)[0]
    return mod.linear_attention(q, k, v, **kw)


@pytest.mark.parametrize("kind, kw", CASES)
def test_gradients_tf_equal_torch(rng, kind, kw):
    q, k, v = _qkv(rng, n=7)
    g = rng.normal(size=(2, 7, 3))  # d loss / d outputs
    tensors = [tf.Variable(to_tf(x)) for x in (q, k, v)]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(_call(atf, kind, *tensors, kw) * to_tf(g))
    grads_tf = tape.gradient(loss, tensors)
    params = [to_torch(x).requires_grad_() for x in (q, k, v)]
    (_call(atorch, kind, *params, kw) * to_torch(g)).sum().backward()
    for name, a, b in zip("qkv", grads_tf, params, strict=True):
        np.testing.assert_allclose(
            to_np(a), to_np(b.grad), atol=1e-5, rtol=1e-5, err_msg=name
        )


@pytest.mark.parametrize("kind, kw", CASES)
def test_torch_gradcheck_float64(rng, kind, kw):
    q, k, v = (
        torch.tensor(x, requires_grad=True) for x in _qkv(rng, b=1, n=5, d=3, d_v=2)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: _call(atorch, kind, q, k, v, kw), (q, k, v)
    )


def test_step_gradients_tf_equal_torch(rng):
    q, k, v = _qkv(rng, n=1)
    state, normaliser = rng.random((2, 4, 3)), rng.random((2, 4))
    xs = (state, normaliser, q[:, 0], k[:, 0], v[:, 0])
    tensors = [tf.Variable(to_tf(x)) for x in xs]
    with tf.GradientTape() as tape:
        out, s, z = atf.linear_attention_step(*tensors)
        loss = tf.reduce_sum(out**2) + tf.reduce_sum(s) + tf.reduce_sum(z**2)
    grads_tf = tape.gradient(loss, tensors)
    params = [to_torch(x).requires_grad_() for x in xs]
    out, s, z = atorch.linear_attention_step(*params)
    ((out**2).sum() + s.sum() + (z**2).sum()).backward()
    for a, b in zip(grads_tf, params, strict=True):
        np.testing.assert_allclose(to_np(a), to_np(b.grad), atol=1e-5, rtol=1e-5)


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
def test_window_errors(rng, mod, conv):
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        mod.sliding_window_mask(5, 0)
    with pytest.raises(ValueError, match="window larger than the sequence.*=6"):
        mod.sliding_window_mask(5, 6)
    with pytest.raises(ValueError, match="num_keys=3"):
        mod.sliding_window_mask(5, 4, num_keys=3)
    with pytest.raises(TypeError, match="window must be an int"):
        mod.sliding_window_mask(5, 2.5)
    with pytest.raises(TypeError, match="causal must be True or False"):
        mod.sliding_window_mask(5, 2, causal="yes")
    q, k, v = (conv(x) for x in _qkv(rng, n=6))
    with pytest.raises(ValueError, match="window larger than the sequence"):
        mod.sliding_window_attention(q, k, v, 7)
    with pytest.raises(ValueError, match="window must be >= 1"):
        mod.sliding_window_attention(q, k, v, 0)
    q5, k6, v6 = (conv(x) for x in _qkv(rng, n=5, nk=6))
    with pytest.raises(ValueError, match=r"num_queries == num_keys.*5 != 6"):
        mod.sliding_window_attention(q5, k6, v6, 2)
    with pytest.raises(ValueError, match="same feature size"):
        mod.sliding_window_attention(q, conv(rng.normal(size=(2, 6, 5))), v, 2)
    with pytest.raises(ValueError, match="values must pair with keys"):
        mod.sliding_window_attention(q, k, conv(rng.normal(size=(2, 5, 3))), 2)


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
def test_linear_errors(rng, mod, conv):
    q, k, v = (conv(x) for x in _qkv(rng, n=6))
    for eps in (0.0, -1e-3):
        with pytest.raises(ValueError, match=f"eps must be > 0, got eps={eps}"):
            mod.linear_attention(q, k, v, eps=eps)
    with pytest.raises(TypeError, match="eps must be a positive float"):
        mod.linear_attention(q, k, v, eps="small")
    with pytest.raises(TypeError, match="feature_map must be None"):
        mod.linear_attention(q, k, v, feature_map="elu")
    with pytest.raises(ValueError, match="keep all axes but the last"):
        mod.linear_attention(q, k, v, feature_map=lambda x: x[:, :1])
    q5, k6, v6 = (conv(x) for x in _qkv(rng, n=5, nk=6))
    assert tuple(mod.linear_attention(q5, k6, v6).shape) == (2, 5, 3)
    with pytest.raises(ValueError, match=r"num_queries == num_keys.*5 != 6"):
        mod.linear_attention(q5, k6, v6, causal=True)
    with pytest.raises(ValueError, match="keys must have 3 axes"):
        mod.linear_attention(q, k[0], v)


@pytest.mark.parametrize("mod, conv", FRAMEWORKS, ids=IDS)
def test_step_errors(rng, mod, conv):
    q, k, v = (conv(rng.normal(size=s)) for s in ((2, 4), (2, 4), (2, 3)))
    state, normaliser = conv(np.zeros((2, 4, 3))), conv(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="state and normaliser go together"):
        mod.linear_attention_step(state, None, q, k, v)
    with pytest.raises(ValueError, match=r"got state \(2, 4, 5\)"):
        mod.linear_attention_step(conv(np.zeros((2, 4, 5))), normaliser, q, k, v)
    with pytest.raises(ValueError, match=r"normaliser \(2, 3\)"):
        mod.linear_attention_step(state, conv(np.zeros((2, 3))), q, k, v)
    with pytest.raises(ValueError, match="r=8 features"):
        mod.linear_attention_step(state, normaliser, q, k, v, _wide_features)
    with pytest.raises(ValueError, match="query must have 2 axes"):
        mod.linear_attention_step(None, None, conv(np.zeros((2, 1, 4))), k, v)
    with pytest.raises(ValueError, match="query and key must have one shape"):
        mod.linear_attention_step(None, None, q, conv(np.zeros((2, 5))), v)
    with pytest.raises(ValueError, match="eps must be > 0"):
        mod.linear_attention_step(None, None, q, k, v, eps=0)
