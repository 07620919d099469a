"""Our multi-head attention equals the built-ins once weights and masks are
converted: keras.layers.MultiHeadAttention, torch.nn.MultiheadAttention and
torch.nn.functional.scaled_dot_product_attention.

Mask polarity: ours, Keras' and SDPA's bool masks mean True = attend;
nn.MultiheadAttention's bool attn_mask means True = NOT allowed.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support.arrays import (
    assert_close,
    inputs,
    make_mask,
    make_params,
    to_np,
    to_tf,
    to_torch,
)

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

HEADS = 2


def not_close(a, b):
    return not np.allclose(to_np(a), to_np(b), atol=1e-3)


def mixed_mask(rng, shape):
    """A random mask whose every row has at least one True and one False, so
    the mask and its inverse both leave something to attend to."""
    mask = rng.random(shape) < 0.5
    mask[..., 0], mask[..., -1] = True, False
    return mask


# --- keras.layers.MultiHeadAttention -----------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mask_kind", [None, "padding", "causal", "full3d", "per_head"])
def test_keras_mha_equals_ours(rng, bias, mask_kind):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, d_model=8, d_out=5, bias=bias)
    mask = make_mask(rng, mask_kind, 2, HEADS, 3, 5)
    out, w = anp.multi_head_attention(q, k, v, params, HEADS, mask)
    layer = atf.to_keras_mha(params, HEADS)
    keras_mask = None if mask is None else atf.to_keras_mask(to_tf(mask), HEADS)
    # Keras takes (query, VALUE, key)
    got_out, got_w = layer(
        to_tf(q),
        to_tf(v),
        to_tf(k),
        attention_mask=keras_mask,
        return_attention_scores=True,
    )
    assert_close(got_out, out)
    assert_close(got_w, w)  # (batch, heads, n_q, n_k), like ours
    # the fused path (no scores returned) gives the same outputs
    assert_close(layer(to_tf(q), to_tf(v), to_tf(k), attention_mask=keras_mask), out)


def test_keras_mask_polarity(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 5)
    mask = mixed_mask(rng, (2, 3, 5))
    out = anp.multi_head_attention(q, k, v, params, HEADS, mask)[0]
    layer = atf.to_keras_mha(params, HEADS)

    def keras_out(m):
        return layer(to_tf(q), to_tf(v), to_tf(k), attention_mask=m)

    assert_close(keras_out(atf.to_keras_mask(to_tf(mask))), out)
    assert not_close(keras_out(to_tf(~mask)), out)  # True = attend in Keras too


def test_keras_takes_values_before_keys(rng):
    q, k, v = inputs(rng, d_k=7)  # keys and values of one size, so both orders run
    params = make_params(rng, 6, 7, 7, 8, 5)
    out = anp.multi_head_attention(q, k, v, params, HEADS)[0]
    layer = atf.to_keras_mha(params, HEADS)
    assert_close(layer(to_tf(q), to_tf(v), to_tf(k)), out)
    assert not_close(layer(to_tf(q), to_tf(k), to_tf(v)), out)


# the converter itself (shapes, per-head masks, errors): test_keras_mask.py


# --- torch.nn.MultiheadAttention ---------------------------------------------------


@pytest.mark.parametrize("d_kv", [(8, 8), (4, 7)])  # in_proj_weight / kdim, vdim
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mask_kind", [None, "padding", "causal", "full3d", "per_head"])
def test_torch_mha_equals_ours(rng, d_kv, bias, mask_kind):
    d_k, d_v = d_kv
    q, k, v = inputs(rng, d_q=8, d_k=d_k, d_v=d_v)
    params = make_params(rng, 8, d_k, d_v, d_model=8, d_out=8, bias=bias)
    mask = make_mask(rng, mask_kind, 2, HEADS, 3, 5)
    out, w = anp.multi_head_attention(q, k, v, params, HEADS, mask)
    mha = atorch.to_torch_mha(params, HEADS)
    assert mha._qkv_same_embed_dim == (d_kv == (8, 8))
    attn_mask = (
        None
        if mask is None
        else atorch.to_torch_mha_mask(to_torch(mask), HEADS, num_queries=3)
    )
    got_out, got_w = mha(
        to_torch(q),
        to_torch(k),
        to_torch(v),
        attn_mask=attn_mask,
        need_weights=True,
        average_attn_weights=False,
    )
    assert_close(got_out, out)
    assert_close(got_w, w)


def test_torch_mha_mask_polarity(rng):
    q, k, v = inputs(rng, d_q=8)
    params = make_params(rng, 8, 4, 7, 8, 8)
    mask = mixed_mask(rng, (2, 3, 5))
    out = anp.multi_head_attention(q, k, v, params, HEADS, mask)[0]
    mha = atorch.to_torch_mha(params, HEADS)

    def torch_out(m):
        return mha(to_torch(q), to_torch(k), to_torch(v), attn_mask=m)[0]

    converted = atorch.to_torch_mha_mask(to_torch(mask), HEADS)
    assert_close(torch_out(converted), out)
    # our mask as it is: torch reads True as "blocked" and attends to the rest
    as_is = to_torch(np.repeat(mask, HEADS, axis=0))
    assert not_close(torch_out(as_is), out)
    assert_close(
        torch_out(as_is), anp.multi_head_attention(q, k, v, params, HEADS, ~mask)[0]
    )


def test_torch_mha_mask_layout(rng):
    """Row b * num_heads + h of the 3-D mask belongs to sequence b, head h."""
    mask = mixed_mask(rng, (2, HEADS, 3, 5))
    got = anp.to_torch_mha_mask(mask, HEADS)
    assert got.shape == (2 * HEADS, 3, 5)
    np.testing.assert_array_equal(got[1 * HEADS + 0], ~mask[1, 0])
    np.testing.assert_array_equal(
        atorch.to_torch_mha_mask(to_torch(mask), HEADS).numpy(), got
    )
    shared = anp.to_torch_mha_mask(anp.causal_mask(3, 5), HEADS)
    assert shared.shape == (3, 5)  # one mask for every sequence and head
    padding = anp.to_torch_mha_mask(np.ones((2, 1, 5), bool), HEADS, num_queries=3)
    assert padding.shape == (2 * HEADS, 3, 5)


def test_torch_mha_needs_equal_query_model_output_sizes(rng):
    for d_q, d_out in ((6, 8), (8, 5)):
        params = make_params(rng, d_q, 4, 7, d_model=8, d_out=d_out)
        with pytest.raises(ValueError, match="needs d_q_in == d_model == d_out") as e:
            atorch.to_torch_mha(params, HEADS)
        assert f"d_q_in={d_q}, d_model=8, d_out={d_out}" in str(e.value)


# --- torch.nn.functional.scaled_dot_product_attention -------------------------------


def _heads(params, x, c):
    return atorch.split_heads(to_torch(x @ params[f"W_{c}"] + params[f"b_{c}"]), HEADS)


@pytest.mark.parametrize("mask_kind", [None, "padding", "causal", "full3d", "per_head"])
def test_sdpa_equals_ours(rng, mask_kind):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 5)
    mask = make_mask(rng, mask_kind, 2, HEADS, 3, 5)
    out = anp.multi_head_attention(q, k, v, params, HEADS, mask)[0]
    sdpa_mask = None if mask is None else atorch.to_sdpa_mask(to_torch(mask))
    heads = F.scaled_dot_product_attention(
        _heads(params, q, "q"),
        _heads(params, k, "k"),
        _heads(params, v, "v"),
        attn_mask=sdpa_mask,
    )
    got = atorch.merge_heads(heads) @ to_torch(params["W_o"]) + to_torch(params["b_o"])
    assert_close(got, out)


def test_sdpa_mask_polarity(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 5)
    mask = mixed_mask(rng, (2, 3, 5))
    qh, kh, vh = (_heads(params, x, c) for x, c in ((q, "q"), (k, "k"), (v, "v")))
    ours = (
        torch.as_tensor(anp.multi_head_attention(q, k, v, params, HEADS, mask)[1])
        @ vh.double()
    )

    def sdpa(m):
        return F.scaled_dot_product_attention(qh, kh, vh, attn_mask=m)

    assert_close(sdpa(atorch.to_sdpa_mask(to_torch(mask))), ours)
    # the nn.MultiheadAttention convention (True = blocked) is wrong here
    wrong = atorch.to_torch_mha_mask(to_torch(mask), HEADS).reshape(2, HEADS, 3, 5)
    assert not_close(sdpa(wrong), ours)


def test_fully_masked_rows_differ_between_apis(rng):
    """Ours, Keras with scores and SDPA give zero weights; torch MHA gives NaN;
    Keras' fused path (no scores returned) averages all values uniformly."""
    params = make_params(rng, 8, 8, 8, 8, 8)
    x = rng.normal(size=(1, 3, 8))
    mask = np.ones((1, 3, 3), bool)
    mask[0, 1] = False
    out, w = anp.multi_head_attention(x, x, x, params, HEADS, mask)
    assert np.all(w[0, :, 1] == 0)
    assert_close(out[0, 1], params["b_o"])
    mha = atorch.to_torch_mha(params, HEADS)
    _, tw = mha(
        *(to_torch(x),) * 3,
        attn_mask=atorch.to_torch_mha_mask(to_torch(mask), HEADS),
        average_attn_weights=False,
    )
    assert torch.isnan(tw[0, :, 1]).all()
    keras_mha = atf.to_keras_mha(params, HEADS)
    _, kw = keras_mha(
        *(to_tf(x),) * 3, attention_mask=to_tf(mask), return_attention_scores=True
    )
    assert np.all(to_np(kw)[0, :, 1] == 0)
    fused = keras_mha(*(to_tf(x),) * 3, attention_mask=to_tf(mask))
    uniform = (x[0] @ params["W_v"] + params["b_v"]).mean(0)
    assert_close(to_np(fused)[0, 1], uniform @ params["W_o"] + params["b_o"])
    q, k, v = (to_torch(x)[:, None],) * 3
    sdpa_mask = atorch.to_sdpa_mask(to_torch(mask))
    assert np.all(
        to_np(F.scaled_dot_product_attention(q, k, v, sdpa_mask))[0, 0, 1] == 0
    )
