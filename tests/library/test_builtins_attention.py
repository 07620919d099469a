"""Our functions against the framework built-ins, and what the built-ins really do.

* keras.layers.Attention: inputs are [query, value, key]; when ``key`` is
  omitted Keras uses the VALUE as the key (not the query). Masks are passed as
  ``mask=[query_mask, value_mask]`` (there is no ``attention_mask`` argument),
  True = attend; a False query_mask entry zeroes that output row.
* keras.layers.AdditiveAttention: scores = sum_j scale_j * tanh(q_j + k_j) -- no
  projections at all (so d_q must equal d_k) and ``scale`` is a (dim,) vector
  acting as w_v. That is additive_score with W_q = W_k = I and w_v = scale.
* Keras masks by subtracting 1e9 from masked scores, so a fully masked row
  gets UNIFORM weights over all keys (masked ones included), not zeros.
* torch.nn.functional.scaled_dot_product_attention: bool attn_mask, True =
  take part. In torch 2.13 (CPU) a fully masked row gives zero outputs and
  zero gradients -- like ours; older releases returned NaN there.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import torch.nn.functional as F
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp

B, NQ, NK, D = 2, 3, 5, 4


@pytest.fixture
def qkv(rng):
    return (
        rng.normal(size=(B, NQ, D)),
        rng.normal(size=(B, NK, D)),
        rng.normal(size=(B, NK, D)),
    )


def keras_attention(layer, inputs, mask=None, **kwargs):
    inputs = [to_tf(x) for x in inputs]
    mask = None if mask is None else [None if m is None else to_tf(m) for m in mask]
    out, w = layer(inputs, mask=mask, return_attention_scores=True, **kwargs)
    return to_np(out), to_np(w)


# --- keras.layers.Attention ---------------------------------------------------


def test_keras_attention_unscaled_is_dot_product(qkv):
    q, k, v = qkv
    out, w = keras_attention(keras.layers.Attention(), [q, v, k])
    ref_out, ref_w = anp.scaled_dot_product_attention(q, k, v, scale=1.0)
    assert_close(out, ref_out)
    assert_close(w, ref_w)


def test_keras_attention_use_scale_is_a_learned_scalar(qkv):
    q, k, v = qkv
    layer = keras.layers.Attention(use_scale=True, score_mode="dot")
    layer.build([q.shape, v.shape, k.shape])
    assert tuple(layer.scale.shape) == ()  # one scalar, initialised to 1
    layer.scale.assign(1 / np.sqrt(D))  # = our default scaling
    out, w = keras_attention(layer, [q, v, k])
    ref_out, ref_w = anp.scaled_dot_product_attention(q, k, v)
    assert_close(out, ref_out)
    assert_close(w, ref_w)
    layer.scale.assign(0.37)
    out, _ = keras_attention(layer, [q, v, k])
    assert_close(out, anp.scaled_dot_product_attention(q, k, v, scale=0.37)[0])


def test_keras_attention_default_key_is_the_value_not_the_query(rng):
    """[query, value] without key: scores use the VALUE as key."""
    q, v = rng.normal(size=(B, NK, D)), rng.normal(size=(B, NK, D))  # q != v
    out, _ = keras_attention(keras.layers.Attention(), [q, v])
    key_is_value = anp.scaled_dot_product_attention(q, v, v, scale=1.0)[0]
    key_is_query = anp.scaled_dot_product_attention(q, q, v, scale=1.0)[0]
    assert_close(out, key_is_value)
    assert not np.allclose(out, key_is_query, atol=1e-3)


def test_keras_attention_mask_polarity(qkv, rng):
    """mask=[query_mask, value_mask], True = attend; inverting it changes things."""
    q, k, v = qkv
    value_mask = rng.random((B, NK)) < 0.6
    value_mask[:, 0] = True  # keep one key per row (see the fully masked test)
    layer = keras.layers.Attention()
    out, w = keras_attention(layer, [q, v, k], mask=[None, value_mask])
    ref_out, ref_w = anp.scaled_dot_product_attention(
        q, k, v, mask=value_mask[:, None, :], scale=1.0
    )
    assert_close(out, ref_out)
    assert_close(w, ref_w)
    assert np.all(w[np.broadcast_to(~value_mask[:, None, :], w.shape)] < 1e-6)
    inverted = ~value_mask
    inverted[:, 0] = True
    out_inv, _ = keras_attention(layer, [q, v, k], mask=[None, inverted])
    assert not np.allclose(out_inv, out, atol=1e-3)


def test_keras_query_mask_zeroes_outputs(qkv):
    q, k, v = qkv
    query_mask = np.array([[True, False, True], [True, True, False]])
    out, w = keras_attention(
        keras.layers.Attention(), [q, v, k], mask=[query_mask, None]
    )
    ref_out, ref_w = anp.scaled_dot_product_attention(q, k, v, scale=1.0)
    assert_close(out, ref_out * query_mask[..., None])
    assert_close(w, ref_w)  # weights are NOT masked, only the outputs


def test_keras_use_causal_mask_matches_causal_mask(rng):
    x = rng.normal(size=(B, NK, D))
    out, w = keras_attention(keras.layers.Attention(), [x, x], use_causal_mask=True)
    ref_out, ref_w = anp.scaled_dot_product_attention(
        x, x, x, mask=anp.causal_mask(NK), scale=1.0
    )
    assert_close(out, ref_out)
    assert_close(w, ref_w)


def test_keras_fully_masked_row_is_uniform_not_zero(qkv):
    q, k, v = qkv
    value_mask = np.ones((B, NK), bool)
    value_mask[1] = False  # batch item 1: every key masked
    _, w = keras_attention(keras.layers.Attention(), [q, v, k], mask=[None, value_mask])
    assert_close(w[1], np.full((NQ, NK), 1 / NK))  # Keras: uniform
    _, ours = anp.scaled_dot_product_attention(
        q, k, v, mask=value_mask[:, None], scale=1.0
    )
    np.testing.assert_array_equal(ours[1], 0.0)  # ours: zeros


# --- keras.layers.AdditiveAttention -------------------------------------------


@pytest.mark.parametrize("use_scale", [True, False])
def test_keras_additive_attention_is_additive_score_with_identities(
    qkv, rng, use_scale
):
    q, k, v = qkv
    layer = keras.layers.AdditiveAttention(use_scale=use_scale)
    layer.build([q.shape, v.shape, k.shape])
    if use_scale:
        assert tuple(layer.scale.shape) == (D,)  # a vector, not a scalar
        w_v = rng.normal(size=D)
        layer.scale.assign(w_v)
    else:
        w_v = np.ones(D)
    value_mask = np.ones((B, NK), bool)
    value_mask[0, 2:] = False
    out, w = keras_attention(layer, [q, v, k], mask=[None, value_mask])
    eye = np.eye(D)
    ref_out, ref_w = anp.key_value_attention(
        q,
        k,
        v,
        lambda a, b: anp.additive_score(a, b, eye, eye, w_v),
        mask=value_mask[:, None, :],
    )
    assert_close(out, ref_out)
    assert_close(w, ref_w)
    assert len(layer.weights) == int(use_scale)  # no W_q, W_k projections


def test_keras_additive_attention_needs_equal_dims(rng):
    q, v = rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 4, 5))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes"):
        keras.layers.AdditiveAttention()([to_tf(q), to_tf(v)])  # q + k: d_q == d_k
    # ours projects first, so different sizes are fine
    s = anp.additive_score(
        q, v, rng.normal(size=(3, 6)), rng.normal(size=(5, 6)), rng.normal(size=6)
    )
    assert s.shape == (1, 2, 4)


# --- torch.nn.functional.scaled_dot_product_attention -------------------------


def test_torch_sdpa_bool_mask_true_means_attend(qkv, rng):
    q, k, v = qkv
    mask = rng.random((B, NQ, NK)) < 0.6
    mask[..., 0] = True
    got = F.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v), attn_mask=to_torch(mask)
    )
    ref, _ = anp.scaled_dot_product_attention(q, k, v, mask=mask)
    assert_close(got, ref)
    inverted = ~mask
    inverted[..., 0] = True
    got_inv = F.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v), attn_mask=to_torch(inverted)
    )
    assert not np.allclose(to_np(got_inv), ref, atol=1e-3)


def test_torch_sdpa_causal_and_scale(qkv):
    q, _, _ = qkv
    x = to_torch(q)
    got = F.scaled_dot_product_attention(x, x, x, is_causal=True, scale=0.3)
    ref, _ = anp.scaled_dot_product_attention(
        q, q, q, mask=anp.causal_mask(NQ), scale=0.3
    )
    assert_close(got, ref)


def test_torch_sdpa_fully_masked_row(qkv):
    """torch 2.13: zeros and zero (finite) gradients, the same as ours."""
    q, k, v = qkv
    mask = np.ones((B, NQ, NK), bool)
    mask[0, 1] = False
    tq = to_torch(q).requires_grad_()
    got = F.scaled_dot_product_attention(
        tq, to_torch(k), to_torch(v), attn_mask=to_torch(mask)
    )
    got.sum().backward()
    assert torch.isfinite(got).all() and torch.isfinite(tq.grad).all()
    np.testing.assert_array_equal(to_np(got)[0, 1], 0.0)
    np.testing.assert_array_equal(to_np(tq.grad)[0, 1], 0.0)
    ours, _ = anp.scaled_dot_product_attention(q, k, v, mask=mask)
    assert_close(got, ours)
