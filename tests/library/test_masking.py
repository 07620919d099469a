"""sequence_mask, causal_mask and masked_softmax: NumPy reference, parity, grads."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse.checks import dtype_name

FW = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}
SETTINGS = settings(max_examples=30, deadline=None)


def random_mask(rng, shape, p=0.6):
    return rng.random(shape) < p


# --- sequence_mask / causal_mask ---------------------------------------------


def test_sequence_mask_reference():
    got = anp.sequence_mask(np.array([1, 3, 0]), 4)
    assert got.shape == (3, 1, 4) and got.dtype == bool
    np.testing.assert_array_equal(got[:, 0], [[1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    per_query = anp.sequence_mask(np.array([[1, 2], [4, 0]]), 3)
    assert per_query.shape == (2, 2, 3)
    np.testing.assert_array_equal(
        per_query, [[[1, 0, 0], [1, 1, 0]], [[1, 1, 1], [0, 0, 0]]]
    )


def test_causal_mask_reference():
    np.testing.assert_array_equal(anp.causal_mask(4), np.tril(np.ones((4, 4), bool)))
    rect = anp.causal_mask(2, 3)
    np.testing.assert_array_equal(rect, [[1, 0, 0], [1, 1, 0]])


@pytest.mark.parametrize("fw", FW)
@pytest.mark.parametrize("lens", [[1, 3, 0], [[1, 2], [4, 0]], [2.5, 0.5]])
def test_sequence_mask_parity(fw, lens):
    mod, conv = FW[fw]
    lens = np.array(lens)
    got = mod.sequence_mask(conv(lens, None), 4)
    assert dtype_name(got) == "bool"
    np.testing.assert_array_equal(to_np(got), anp.sequence_mask(lens, 4))


@pytest.mark.parametrize("fw", FW)
@pytest.mark.parametrize("nq,nk", [(1, 1), (4, 4), (2, 5), (5, 2)])
def test_causal_mask_parity(fw, nq, nk):
    mod, _ = FW[fw]
    np.testing.assert_array_equal(
        to_np(mod.causal_mask(nq, nk)), anp.causal_mask(nq, nk)
    )


# --- masked_softmax ---------------------------------------------------------


@st.composite
def scores_and_mask(draw):
    b, nq, nk = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
    )
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["none", "full", "keys", "causal", "last"]))
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=3.0, size=(b, nq, nk))
    shapes = {
        "full": (b, nq, nk),
        "keys": (b, 1, nk),
        "causal": (nq, nk),
        "last": (nk,),
    }
    mask = None if kind == "none" else random_mask(rng, shapes[kind])
    return scores, mask


@SETTINGS
@given(scores_and_mask())
def test_masked_softmax_parity(data):
    scores, mask = data
    ref = anp.masked_softmax(scores, mask)
    for mod, conv in FW.values():
        got = mod.masked_softmax(conv(scores), None if mask is None else conv(mask))
        assert_close(got, ref, what=mod.__name__)


def test_masked_softmax_keeps_dtype():
    x = np.zeros((1, 2, 3), np.float32)
    assert anp.masked_softmax(x, np.ones(3, bool)).dtype == np.float32


@pytest.mark.parametrize("fw", ["numpy", *FW])
def test_fully_masked_row_is_zero_not_nan(fw):
    mod, conv = (anp, np.asarray) if fw == "numpy" else FW[fw]
    scores = np.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])
    mask = np.array([[[True, False, True], [False, False, False]]])
    got = to_np(mod.masked_softmax(conv(scores), conv(mask)))
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got[0, 1], 0.0)
    np.testing.assert_allclose(got[0, 0].sum(), 1.0, rtol=1e-6)
    assert got[0, 0, 1] == 0.0


def _cotangent(shape, seed=1):
    return np.random.default_rng(seed).normal(size=shape)


def tf_grads(fn, arrays, cot):
    """Gradient of sum(fn(*arrays) * cot) w.r.t. every array, in TF."""
    xs = [to_tf(a) for a in arrays]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.reduce_sum(fn(*xs) * to_tf(cot))
    return [to_np(g) for g in tape.gradient(loss, xs)]


def torch_grads(fn, arrays, cot):
    """Gradient of sum(fn(*arrays) * cot) w.r.t. every array, in PyTorch."""
    xs = [to_torch(a).requires_grad_() for a in arrays]
    (fn(*xs) * to_torch(cot)).sum().backward()
    return [to_np(x.grad) for x in xs]


@SETTINGS
@given(scores_and_mask())
def test_masked_softmax_gradients_agree(data):
    scores, mask = data
    cot = _cotangent(scores.shape)
    g_tf = tf_grads(
        lambda s: atf.masked_softmax(s, None if mask is None else to_tf(mask)),
        [scores],
        cot,
    )
    g_pt = torch_grads(
        lambda s: atorch.masked_softmax(s, None if mask is None else to_torch(mask)),
        [scores],
        cot,
    )
    assert np.all(np.isfinite(g_tf[0])) and np.all(np.isfinite(g_pt[0]))
    assert_close(g_tf[0], g_pt[0])
    if mask is not None:
        masked = ~np.broadcast_to(mask, scores.shape)
        assert np.all(g_tf[0][masked] == 0) and np.all(g_pt[0][masked] == 0)


def test_fully_masked_row_gradient_is_finite_zero():
    scores = np.array([[[0.3, -1.0], [2.0, 1.0]]])
    mask = np.array([[[True, True], [False, False]]])
    cot = _cotangent(scores.shape)
    for grads in (
        tf_grads(lambda s: atf.masked_softmax(s, to_tf(mask)), [scores], cot),
        torch_grads(lambda s: atorch.masked_softmax(s, to_torch(mask)), [scores], cot),
    ):
        assert np.all(np.isfinite(grads[0]))
        np.testing.assert_array_equal(grads[0][0, 1], 0.0)


# --- causal alignment: top-left (default) and bottom-right (KV cache) --------

SHAPES = [(1, 1), (3, 3), (2, 5), (1, 4), (5, 2)]


def test_causal_mask_bottom_right_reference():
    np.testing.assert_array_equal(
        anp.causal_mask(2, 4, align="bottom_right"), [[1, 1, 1, 0], [1, 1, 1, 1]]
    )
    np.testing.assert_array_equal(  # more queries than keys: leading rows see none
        anp.causal_mask(4, 2, align="bottom_right"),
        [[0, 0], [0, 0], [1, 0], [1, 1]],
    )
    for n in (1, 4):  # square: the two alignments are the same triangle
        np.testing.assert_array_equal(
            anp.causal_mask(n, align="bottom_right"), anp.causal_mask(n)
        )
    assert (
        anp.causal_mask(2, 4, align="top_left").tolist()
        == anp.causal_mask(2, 4).tolist()
    )


@pytest.mark.parametrize("fw", FW)
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("nq,nk", SHAPES)
def test_causal_mask_align_parity(fw, align, nq, nk):
    mod, _ = FW[fw]
    got = mod.causal_mask(nq, nk, align=align)
    assert dtype_name(got) == "bool"
    np.testing.assert_array_equal(to_np(got), anp.causal_mask(nq, nk, align=align))


@pytest.mark.parametrize("mod", [anp, atf, atorch], ids=["numpy", "tf", "torch"])
@pytest.mark.parametrize("align", ["bottom-right", "lower_right", None, 1])
def test_causal_mask_bad_align_names_it(mod, align):
    with pytest.raises(ValueError, match="align must be 'top_left'"):
        mod.causal_mask(2, 3, align=align)


@pytest.mark.parametrize("nq,nk", SHAPES)
def test_causal_mask_matches_torch_causal_bias(nq, nk):
    """torch.nn.attention.bias: causal_upper_left = ours top_left and
    causal_lower_right = ours bottom_right, read from what SDPA does with them:
    with one-hot values the output IS the weight matrix, > 0 where attended."""
    import warnings

    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    rng = np.random.default_rng(nq * 10 + nk)
    q = torch.tensor(rng.normal(size=(1, 1, nq, 4)))
    k = torch.tensor(rng.normal(size=(1, 1, nk, 4)))
    one_hot = torch.eye(nk, dtype=q.dtype)[None, None]
    for bias, align in (
        (causal_upper_left, "top_left"),
        (causal_lower_right, "bottom_right"),
    ):
        with warnings.catch_warnings():  # lower-right, nq > nk: NaN rows, warned
            warnings.simplefilter("ignore", UserWarning)
            weights = F.scaled_dot_product_attention(
                q, k, one_hot, attn_mask=bias(nq, nk)
            )[0, 0]
        attended = (weights > 0).numpy()  # NaN (no key at all) compares False
        np.testing.assert_array_equal(
            attended, anp.causal_mask(nq, nk, align=align), err_msg=align
        )


def _qkv(nq, nk, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(1, n, 4)).astype(np.float32) for n in (nq, nk, nk)]


@pytest.mark.parametrize("nq,nk", [(2, 5), (1, 4), (3, 3)])
def test_sdpa_is_causal_is_top_left(nq, nk):
    """F.scaled_dot_product_attention(is_causal=True) = our default alignment,
    and differs from bottom_right whenever nq < nk."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.tensor(x) for x in _qkv(nq, nk))
    flag = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = F.scaled_dot_product_attention(
        q, k, v, attn_mask=atorch.causal_mask(nq, nk)
    )
    bottom_right = F.scaled_dot_product_attention(
        q, k, v, attn_mask=atorch.causal_mask(nq, nk, align="bottom_right")
    )
    assert_close(flag, top_left)
    if nq < nk:
        assert to_np((flag - bottom_right).abs().max()) > 1e-2


@pytest.mark.parametrize("nq,nk", [(2, 5), (1, 4), (3, 3)])
def test_keras_is_causal_is_top_left(nq, nk):
    """keras.ops.dot_product_attention(is_causal=True) and
    MultiHeadAttention(use_causal_mask=True) are top-left aligned too."""
    import keras

    q, k, v = (x[:, :, None] for x in _qkv(nq, nk))  # (batch, n, heads=1, d)
    flag = keras.ops.dot_product_attention(q, k, v, is_causal=True)
    for align, same in (("top_left", True), ("bottom_right", nq == nk)):
        mask = tf.constant(anp.causal_mask(nq, nk, align=align)[None, None])
        masked = keras.ops.dot_product_attention(q, k, v, mask=mask)
        gap = float(np.abs(to_np(flag) - to_np(masked)).max())
        assert (gap < 1e-5) == same, (align, gap)
    mha = keras.layers.MultiHeadAttention(num_heads=1, key_dim=4)
    x_q, x_k = tf.constant(q[:, :, 0]), tf.constant(k[:, :, 0])
    flag = mha(x_q, x_k, use_causal_mask=True)
    masked = mha(x_q, x_k, attention_mask=anp.causal_mask(nq, nk)[None])
    assert_close(flag, masked)


def test_bottom_right_is_what_a_kv_cache_decoder_needs():
    """The last nq rows of causal self-attention over n tokens equal nq new
    queries over all n cached keys with a bottom-right mask, not top-left."""
    n, nq = 6, 2
    x = np.random.default_rng(3).normal(size=(1, n, 4))
    full = anp.key_value_attention(
        x, x, x, anp.scaled_dot_score, mask=anp.causal_mask(n)
    )[0]
    for mod, conv in [(anp, np.asarray), *FW.values()]:
        xs, new = conv(x), conv(x[:, -nq:])
        cached = mod.key_value_attention(
            new,
            xs,
            xs,
            mod.scaled_dot_score,
            mask=mod.causal_mask(nq, n, align="bottom_right"),
        )[0]
        assert_close(cached, full[:, -nq:], what=mod.__name__)
        wrong = mod.key_value_attention(
            new, xs, xs, mod.scaled_dot_score, mask=mod.causal_mask(nq, n)
        )[0]
        assert np.abs(to_np(wrong) - full[:, -nq:]).max() > 1e-2
