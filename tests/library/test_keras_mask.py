"""to_keras_mask: our bool mask (True = attend) -> the attention_mask of
keras.layers.MultiHeadAttention, shared by the heads or one per head.

Keras 3 applies a 4-D (batch, num_heads, n_q, n_k) attention_mask head by head
(``_masked_softmax`` and the fused ``dot_product_attention`` path only add the
axes a shorter mask lacks). These tests run the converted mask through the
real Keras layer and compare with our per-head masked ``multi_head_attention``.
"""

import numpy as np
import pytest
import tensorflow as tf
from support.arrays import assert_close, inputs, make_params, to_np, to_tf

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

HEADS = 2


def per_head_mask(rng, batch, n_q, n_k):
    """(batch, HEADS, n_q, n_k): head 0 causal, head 1 a random mask; every row
    keeps key 0, and the two heads' masks differ in many places."""
    causal = np.broadcast_to(anp.causal_mask(n_q, n_k), (batch, n_q, n_k))
    random = rng.random((batch, n_q, n_k)) < 0.5
    random[..., 0] = True
    mask = np.stack([causal, random], axis=1)
    assert (mask[:, 0] != mask[:, 1]).sum() >= 4  # the test means something
    return mask


def keras_run(layer, q, k, v, mask, **kwargs):
    """(outputs with scores, scores, outputs of the fused path)."""
    out, scores = layer(
        to_tf(q),
        to_tf(v),
        to_tf(k),
        attention_mask=mask,
        return_attention_scores=True,
        **kwargs,
    )  # Keras takes (query, VALUE, key)
    fused = layer(to_tf(q), to_tf(v), to_tf(k), attention_mask=mask, **kwargs)
    return out, scores, fused


@pytest.mark.parametrize("batch_of_mask", [2, 1])
def test_per_head_mask_reaches_each_keras_head(rng, batch_of_mask):
    """Head h of the Keras layer is masked by slice h of the mask: its scores
    are exactly ours with the 4-D mask, and they are NOT what head 0's mask
    shared by every head gives (so a converter that dropped or broadcast the
    head axis fails here)."""
    q, k, v = inputs(rng, n_q=4, n_k=4)
    params = make_params(rng, 6, 4, 7, d_model=8, d_out=5)
    mask = per_head_mask(rng, batch_of_mask, 4, 4)
    out, w = anp.multi_head_attention(q, k, v, params, HEADS, mask)
    layer = atf.to_keras_mha(params, HEADS)
    keras_mask = atf.to_keras_mask(mask, num_heads=HEADS)
    assert tuple(keras_mask.shape) == (batch_of_mask, HEADS, 4, 4)
    got_out, got_w, fused = keras_run(layer, q, k, v, keras_mask)
    assert_close(got_w, w)
    assert_close(got_out, out)
    assert_close(fused, out)  # the fused path applies it per head too
    # masked entries get exactly zero weight, head by head
    full = np.broadcast_to(mask, w.shape)
    assert np.all(to_np(got_w)[~full] == 0)
    # head 1's mask differs from head 0's, and it matters
    shared = np.broadcast_to(mask[:, :1], mask.shape)
    w_shared = anp.multi_head_attention(q, k, v, params, HEADS, shared)[1]
    assert np.abs(to_np(got_w)[:, 1] - w_shared[:, 1]).max() > 1e-2


def test_per_head_mask_equals_heads_computed_one_by_one(rng):
    """Our own per-head computation, head by head with the single-head
    scaled_dot_product_attention and its own mask, equals Keras' output."""
    q, k, v = inputs(rng, n_q=4, n_k=4)
    params = make_params(rng, 6, 4, 7, d_model=8, d_out=5)
    mask = per_head_mask(rng, 2, 4, 4)
    d_head = 8 // HEADS
    heads = []
    for h in range(HEADS):
        cols = slice(h * d_head, (h + 1) * d_head)
        qh, kh, vh = (
            x @ params[f"W_{c}"][:, cols] + params[f"b_{c}"][cols]
            for x, c in ((q, "q"), (k, "k"), (v, "v"))
        )
        heads.append(anp.scaled_dot_product_attention(qh, kh, vh, mask[:, h])[0])
    expected = np.concatenate(heads, axis=-1) @ params["W_o"] + params["b_o"]
    layer = atf.to_keras_mha(params, HEADS)
    got = layer(
        to_tf(q),
        to_tf(v),
        to_tf(k),
        attention_mask=atf.to_keras_mask(mask, num_heads=HEADS),
    )
    assert_close(got, expected)


def test_per_head_mask_combines_with_use_causal_mask(rng):
    """Keras ANDs use_causal_mask=True with a 4-D attention_mask."""
    q, k, v = inputs(rng, n_q=4, n_k=4)
    params = make_params(rng, 6, 4, 7, d_model=8, d_out=5)
    mask = per_head_mask(rng, 2, 4, 4)
    mask[:, 0] = True  # head 0: only the causal flag restricts it
    both = mask & anp.causal_mask(4)
    out, w = anp.multi_head_attention(q, k, v, params, HEADS, both)
    layer = atf.to_keras_mha(params, HEADS)
    got_out, got_w, fused = keras_run(
        layer, q, k, v, atf.to_keras_mask(mask, HEADS), use_causal_mask=True
    )
    assert_close(got_w, w)
    assert_close(got_out, out)
    assert_close(fused, out)


def test_shared_masks_keep_their_three_axis_form():
    assert anp.to_keras_mask(np.ones(5, bool)).shape == (1, 1, 5)
    assert anp.to_keras_mask(np.ones((3, 5), bool)).shape == (1, 3, 5)
    assert anp.to_keras_mask(np.ones((2, 1, 5), bool)).shape == (2, 1, 5)
    shared4 = np.ones((2, 1, 3, 5), bool)
    assert anp.to_keras_mask(shared4).shape == (2, 3, 5)
    assert anp.to_keras_mask(shared4, num_heads=4).shape == (2, 3, 5)


def test_tf_twin_returns_a_bool_tensor_and_torch_reexports_numpy():
    mask = np.ones((1, HEADS, 3, 5), bool)
    mask[0, 1, :, -1] = False
    got = atf.to_keras_mask(to_tf(mask), num_heads=HEADS)
    assert isinstance(got, tf.Tensor) and got.dtype == tf.bool
    np.testing.assert_array_equal(got.numpy(), mask)
    assert atorch.to_keras_mask is anp.to_keras_mask


def test_per_head_mask_without_num_heads_says_what_to_pass():
    mask = np.ones((2, 3, 4, 5), bool)
    for convert in (np.asarray, to_tf):
        with pytest.raises(
            ValueError,
            match=r"per-head mask .*\(2, 3, 4, 5\) needs "
            r"num_heads.*num_heads=3",
        ):
            atf.to_keras_mask(convert(mask))


def test_wrong_head_axis_names_both_counts():
    with pytest.raises(ValueError, match="3 entries on the head axis.*num_heads=2"):
        anp.to_keras_mask(np.ones((2, 3, 4, 5), bool), num_heads=2)
    with pytest.raises(ValueError, match="3 entries on the head axis.*num_heads=2"):
        atf.to_keras_mask(np.ones((1, 3, 4, 5), bool), num_heads=2)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "2"])
def test_num_heads_must_be_a_positive_int(bad):
    with pytest.raises((TypeError, ValueError), match="^num_heads must be"):
        anp.to_keras_mask(np.ones((2, 2, 4, 5), bool), num_heads=bad)


def test_bad_rank_and_dtype_are_refused():
    with pytest.raises(ValueError, match="mask must have 1 to 4 axes"):
        anp.to_keras_mask(np.ones((1, 2, 2, 4, 5), bool), num_heads=2)
    with pytest.raises(ValueError, match="mask must have 1 to 4 axes"):
        anp.to_keras_mask(np.array(True))
    with pytest.raises(TypeError, match="mask must be boolean"):
        anp.to_keras_mask(np.ones((2, 4, 5)), num_heads=2)
