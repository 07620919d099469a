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
