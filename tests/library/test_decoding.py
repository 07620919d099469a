"""Decoding: repeat_kv, grouped-query attention, the KV cache, kv_cache_bytes.

NumPy (float64) == TF == torch on outputs and gradients; cached decoding equals
the full causal pass for any split into chunks; one kv head per query head is
the course's MHA; the built-ins (keras.layers.GroupQueryAttention, torch's
scaled_dot_product_attention(enable_gqa=True)) compute the same with copied
weights; the group mapping, cache shapes and contents; bad input errors.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

FRAMEWORKS = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}
ALL = {"numpy": (anp, np.asarray), **FRAMEWORKS}


def gqa_params(rng, d_in, num_heads, num_kv_heads, head_dim, d_out=None, bias=True):
    """Random GQA weights: W_q (d_in, H*dh), W_k/W_v (d_in, G*dh), W_o."""
    d_out = d_in if d_out is None else d_out
    cols = {"q": num_heads * head_dim, "k": num_kv_heads * head_dim}
    cols["v"] = cols["k"]
    params = {
        f"W_{c}": rng.normal(size=(d_in, n)) / math.sqrt(d_in) for c, n in cols.items()
    }
    params["W_o"] = rng.normal(size=(cols["q"], d_out)) / math.sqrt(cols["q"])
    if bias:
        params.update({f"b_{c}": 0.3 * rng.normal(size=n) for c, n in cols.items()})
        params["b_o"] = 0.3 * rng.normal(size=d_out)
    return params


def conv(params, convert):
    return {k: convert(v) for k, v in params.items()}


def full_pass(x, params, num_heads, num_kv_heads):
    """The uncached reference: causal GQA self-attention over all of x."""
    mask = anp.causal_mask(x.shape[1])
    return anp.grouped_query_attention(x, x, x, params, num_heads, num_kv_heads, mask)


def decode_in_chunks(module, x, params, num_heads, num_kv_heads, sizes):
    """Feed x chunk by chunk through decode_step; concatenated outputs, cache."""
    cache, outs, start = None, [], 0
    for size in sizes:
        out, cache = module.decode_step(
            x[:, start : start + size], params, num_heads, num_kv_heads, cache
        )
        outs.append(to_np(out))
        start += size
    return np.concatenate(outs, axis=1), cache


# --- the group mapping ------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads"), [(4, 1), (4, 2), (6, 3), (4, 4)]
)
def test_repeat_kv_maps_query_head_h_to_kv_head_h_over_group_size(
    rng, num_heads, num_kv_heads
):
    x = rng.normal(size=(2, num_kv_heads, 3, 5))
    group = num_heads // num_kv_heads
    expected = np.stack([x[:, h // group] for h in range(num_heads)], axis=1)
    for module, convert in ALL.values():
        got = module.repeat_kv(convert(x), num_heads)
        assert tuple(got.shape) == (2, num_heads, 3, 5)
        assert_close(got, expected, what=module.__name__)
    # torch's repeat_interleave is the same order; a tile (0, 1, 0, 1) is not
    ref = to_torch(x).repeat_interleave(group, dim=1)
    assert_close(ref, expected)
    if 1 < num_kv_heads < num_heads:
        tiled = np.tile(x, (1, group, 1, 1))
        assert not np.allclose(tiled, expected)


def test_gqa_is_mha_with_each_kv_head_copied_to_its_group(rng):
    """GQA == the course's MHA whose W_k, W_v (and biases) repeat each kv head's
    columns for the query heads of its group: the mapping, through the layer."""
    H, G, dh = 6, 2, 3
    params = gqa_params(rng, 10, H, G, dh)
    mha = dict(params)
    for name in ("W_k", "W_v", "b_k", "b_v"):
        blocks = np.split(params[name], G, axis=-1)  # one block per kv head
        mha[name] = np.concatenate([blocks[h // (H // G)] for h in range(H)], -1)
    x = rng.normal(size=(2, 5, 10))
    mask = anp.causal_mask(5)
    for module, convert in ALL.values():
        got = module.grouped_query_attention(
            convert(x),
            convert(x),
            convert(x),
            conv(params, convert),
            H,
            G,
            convert(mask),
        )
        want = anp.multi_head_attention(x, x, x, mha, H, mask)
        assert_close(got[0], want[0], what=module.__name__)
        assert_close(got[1], want[1], what=module.__name__)


@pytest.mark.parametrize("bias", [True, False])
def test_one_kv_head_per_query_head_is_the_course_mha(rng, bias):
    H, dh = 4, 3
    params = gqa_params(rng, 8, H, H, dh, d_out=5, bias=bias)
    q, kv = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 6, 8))
    mask = rng.random((2, 1, 6)) < 0.7
    mask[..., 0] = True
    want = anp.multi_head_attention(q, kv, kv, params, H, mask)
    for module, convert in ALL.values():
        got = module.grouped_query_attention(
            convert(q),
            convert(kv),
            convert(kv),
            conv(params, convert),
            H,
            H,
            convert(mask),
        )
        mha = module.multi_head_attention(
            convert(q),
            convert(kv),
            convert(kv),
            conv(params, convert),
            H,
            convert(mask),
        )
        for a, b, c in zip(got, mha, want, strict=True):
            assert_close(a, b, what=module.__name__)
            assert_close(a, c, what=module.__name__)


# --- parity -------------------------------------------------------------------


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "per_head"])
def test_grouped_query_attention_parity(rng, num_kv_heads, mask_kind):
    H, dh = 4, 2
    params = gqa_params(rng, 6, H, num_kv_heads, dh, d_out=5)
    q, k, v = (rng.normal(size=(2, n, d)) for n, d in ((3, 6), (5, 7), (5, 4)))
    params["W_k"] = rng.normal(size=(7, num_kv_heads * dh))
    params["W_v"] = rng.normal(size=(4, num_kv_heads * dh))
    mask = {
        None: None,
        "causal": anp.causal_mask(3, 5, align="bottom_right"),
        "padding": np.arange(5)[None, None] < np.array([5, 2])[:, None, None],
        "per_head": rng.random((2, H, 3, 5)) < 0.6,
    }[mask_kind]
    if mask is not None and mask.ndim == 4:
        mask[..., 0] = True
    out, w = anp.grouped_query_attention(q, k, v, params, H, num_kv_heads, mask)
    assert out.shape == (2, 3, 5) and w.shape == (2, H, 3, 5)
    assert_close(w.sum(-1), np.ones((2, H, 3)))
    for module, convert in FRAMEWORKS.values():
        got = module.grouped_query_attention(
            convert(q),
            convert(k),
            convert(v),
            conv(params, convert),
            H,
            num_kv_heads,
            None if mask is None else convert(mask),
        )
        assert_close(got[0], out, what=f"{module.__name__} outputs")
        assert_close(got[1], w, what=f"{module.__name__} weights")


def _numeric_gradient(f, params, name, eps=1e-6):
    """Central differences of the float64 NumPy loss f(params) w.r.t. params[name]."""
    grad = np.zeros_like(params[name])
    for idx in np.ndindex(grad.shape):
        shifted = {k: v.copy() for k, v in params.items()}
        shifted[name][idx] += eps
        up = f(shifted)
        shifted[name][idx] -= 2 * eps
        grad[idx] = (up - f(shifted)) / (2 * eps)
    return grad


def test_decode_step_gradients_numpy_tf_torch_agree(rng):
    """Gradients through a cached step (cache from a first chunk, then two new
    tokens) of x and of every parameter: TF == torch == NumPy's central
    differences in float64, at 1e-5."""
    H, G, dh = 4, 2, 2
    params = gqa_params(rng, 6, H, G, dh)
    x = rng.normal(size=(2, 5, 6))
    probe = rng.normal(size=(2, 2, 6))  # loss = sum(outputs of the 2nd step * probe)

    def loss_np(p, x=x):
        _, cache = anp.decode_step(x[:, :3], p, H, G)
        out, _ = anp.decode_step(x[:, 3:], p, H, G, cache)
        return float((out * probe).sum())

    tf_x = tf.Variable(to_tf(x))
    tf_p = {n: tf.Variable(to_tf(p)) for n, p in params.items()}
    with tf.GradientTape() as tape:
        _, cache = atf.decode_step(tf_x[:, :3], tf_p, H, G)
        out, _ = atf.decode_step(tf_x[:, 3:], tf_p, H, G, cache)
        loss = tf.reduce_sum(out * to_tf(probe))
    tf_grads = tape.gradient(loss, [tf_x, *tf_p.values()])

    t_x = to_torch(x).requires_grad_()
    t_p = {n: to_torch(p).requires_grad_() for n, p in params.items()}
    _, cache = atorch.decode_step(t_x[:, :3], t_p, H, G)
    out, _ = atorch.decode_step(t_x[:, 3:], t_p, H, G, cache)
    (out * to_torch(probe)).sum().backward()
    t_grads = [t_x.grad, *(t.grad for t in t_p.values())]

    def loss_of_x(p):
        return loss_np(params, p["x"])

    numeric = [_numeric_gradient(loss_of_x, {"x": x.copy()}, "x")]
    numeric += [_numeric_gradient(loss_np, params, name) for name in params]
    for name, g_tf, g_t, g_np in zip(
        ["x", *params], tf_grads, t_grads, numeric, strict=True
    ):
        assert_close(g_tf, g_t, what=name)
        assert_close(g_t, g_np, what=name)
    # the cached tokens' keys/values carry gradient back to the first chunk
    assert np.abs(to_np(t_grads[0])[:, :3]).max() > 1e-3


# --- cached decoding == the full causal pass ---------------------------------------


@st.composite
def split_problem(draw):
    num_kv_heads = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, 9))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=4))) if n > 1 else []
    sizes = np.diff([0, *cuts, n]).tolist()
    return num_kv_heads, n, sizes, draw(st.integers(0, 2**16))


@settings(max_examples=25, deadline=None)
@given(problem=split_problem())
def test_cached_decoding_equals_the_full_causal_pass_for_any_split(problem):
    num_kv_heads, n, sizes, seed = problem
    rng = np.random.default_rng(seed)
    H, dh, batch = 4, 3, 2
    params = gqa_params(rng, 8, H, num_kv_heads, dh)
    x = rng.normal(size=(batch, n, 8))
    want, _ = full_pass(x, params, H, num_kv_heads)
    for module, convert in ALL.values():
        got, cache = decode_in_chunks(
            module, convert(x), conv(params, convert), H, num_kv_heads, sizes
        )
        assert_close(got, want, what=f"{module.__name__} split {sizes}")
        # the cache holds every token's projected keys and values, in order
        keys = anp.split_heads(x @ params["W_k"] + params["b_k"], num_kv_heads)
        values = anp.split_heads(x @ params["W_v"] + params["b_v"], num_kv_heads)
        assert tuple(cache.keys.shape) == (batch, num_kv_heads, n, dh)
        assert cache.length == n
        assert_close(cache.keys, keys)
        assert_close(cache.values, values)


def test_layer_decodes_token_by_token_like_its_full_pass(rng):
    np.random.seed(0)
    layer = anp.GroupedQueryAttention(4, 2, 8)
    x = rng.normal(size=(1, 6, 8))
    want, _ = layer(x)
    for module, convert in FRAMEWORKS.values():
        other = module.GroupedQueryAttention(4, 2, 8)
        module.set_params(other, layer.params)
        cache, outs = None, []
        for i in range(6):
            out, cache = other(convert(x[:, i : i + 1]), cache)
            outs.append(to_np(out))
        assert_close(np.concatenate(outs, 1), want, what=module.__name__)
        assert repr(cache) == "KVCache(batch=1, num_kv_heads=2, length=6, head_dim=2)"


def test_top_left_mask_breaks_cached_decoding(rng):
    """The hostile case: with fewer new queries than keys, the top-left causal
    mask hides cached keys from the new queries and the outputs change."""
    H, G = 4, 2
    params = gqa_params(rng, 8, H, G, 2)
    x = rng.normal(size=(2, 6, 8))
    want, _ = full_pass(x, params, H, G)
    _, cache = anp.decode_step(x[:, :4], params, H, G)
    for align, ok in (("bottom_right", True), ("top_left", False)):
        mask = anp.causal_mask(2, 6, align=align)
        got, _ = anp.decode_step(x[:, 4:], params, H, G, cache, mask)
        assert np.allclose(got, want[:, 4:], atol=1e-10) == ok, align


def test_append_returns_a_new_cache_and_leaves_the_old_one(rng):
    for module, convert in ALL.values():
        k = convert(rng.normal(size=(1, 2, 3, 4)))
        cache = module.KVCache(k, k)
        longer = cache.append(convert(rng.normal(size=(1, 2, 2, 4))), k[:, :, :2])
        assert (cache.length, longer.length) == (3, 5)
        assert_close(longer.keys[:, :, :3], cache.keys)


# --- cache sizes ------------------------------------------------------------------


def test_kv_cache_bytes_formula_and_measured_nbytes(rng):
    assert anp.kv_cache_bytes(1, 1, 1, 1) == 8  # keys + values, 4 bytes each
    assert anp.kv_cache_bytes(32, 8, 128, 4096, batch=2, dtype_bytes=2) == (
        2 * 32 * 8 * 128 * 4096 * 2 * 2
    )
    for fw, (module, convert) in ALL.items():
        assert module.kv_cache_bytes is anp.kv_cache_bytes or fw == "numpy"
        for G in (1, 2, 4):
            params = gqa_params(rng, 8, 4, G, 2)
            _, cache = module.decode_step(
                convert(rng.normal(size=(3, 5, 8))), conv(params, convert), 4, G
            )
            itemsize = 8 if fw == "numpy" else 4
            assert cache.nbytes == anp.kv_cache_bytes(1, G, 2, 5, 3, itemsize)
            keys, values = to_np(cache.keys), to_np(cache.values)
            assert cache.nbytes == keys.nbytes + values.nbytes


# --- the built-ins, with copied weights --------------------------------------------


def _keras_gqa(params, H, G, dh):
    d = params["W_q"].shape[0]
    layer = keras.layers.GroupQueryAttention(dh, H, G)
    layer.build((None, None, d), (None, None, d))
    for name, dense in (
        ("q", layer._query_dense),
        ("k", layer._key_dense),
        ("v", layer._value_dense),
    ):
        heads = H if name == "q" else G
        dense.kernel.assign(params[f"W_{name}"].reshape(d, heads, dh))
        dense.bias.assign(params[f"b_{name}"].reshape(heads, dh))
    layer._output_dense.kernel.assign(params["W_o"].reshape(H, dh, -1))
    layer._output_dense.bias.assign(params["b_o"])
    return layer


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_keras_group_query_attention_with_copied_weights(rng, num_kv_heads):
    H, dh = 4, 3
    params = gqa_params(rng, 8, H, num_kv_heads, dh)
    layer = _keras_gqa(params, H, num_kv_heads, dh)
    x = rng.normal(size=(2, 6, 8))
    new = x[:, 4:]  # two new queries over all six keys
    mask = anp.causal_mask(2, 6, align="bottom_right")
    want, w = anp.grouped_query_attention(new, x, x, params, H, num_kv_heads, mask)
    got, scores = layer(  # Keras: (query, value, key)
        to_tf(new),
        to_tf(x),
        to_tf(x),
        attention_mask=to_tf(np.broadcast_to(mask, (2, 2, 6))),
        return_attention_scores=True,
    )
    assert_close(got, want)
    assert_close(scores, w)
    # use_causal_mask is top-left aligned: right for a full pass, wrong here
    full, _ = full_pass(x, params, H, num_kv_heads)
    assert_close(layer(to_tf(x), to_tf(x), use_causal_mask=True), full)
    top_left = anp.grouped_query_attention(
        new, x, x, params, H, num_kv_heads, anp.causal_mask(2, 6)
    )[0]
    assert_close(layer(to_tf(new), to_tf(x), use_causal_mask=True), top_left)
    assert not np.allclose(top_left, want, atol=1e-3)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_torch_sdpa_enable_gqa_on_the_cache(rng, num_kv_heads):
    """F.scaled_dot_product_attention(q, cache.keys, cache.values,
    enable_gqa=True) over our cache's (batch, G, t, dh) tensors gives our
    step's heads; is_causal=True is top-left aligned, so a cached step needs
    the bottom-right mask passed explicitly."""
    H, dh = 4, 3
    params = gqa_params(rng, 8, H, num_kv_heads, dh)
    tp = conv(params, to_torch)
    x = to_torch(rng.normal(size=(2, 6, 8)))
    _, cache = atorch.decode_step(x[:, :4], tp, H, num_kv_heads)
    want, cache = atorch.decode_step(x[:, 4:], tp, H, num_kv_heads, cache)
    q = atorch.split_heads(x[:, 4:] @ tp["W_q"] + tp["b_q"], H)  # (2, H, 2, dh)
    mask = atorch.causal_mask(2, 6, align="bottom_right")
    heads = F.scaled_dot_product_attention(
        q, cache.keys, cache.values, attn_mask=mask, enable_gqa=True
    )
    got = atorch.merge_heads(heads) @ tp["W_o"] + tp["b_o"]
    assert_close(got, want)
    from torch.nn.attention.bias import causal_lower_right

    lower_right = F.scaled_dot_product_attention(
        q, cache.keys, cache.values, attn_mask=causal_lower_right(2, 6), enable_gqa=True
    )
    assert_close(lower_right, heads)
    wrong = F.scaled_dot_product_attention(
        q, cache.keys, cache.values, is_causal=True, enable_gqa=True
    )
    top_left = F.scaled_dot_product_attention(
        q,
        cache.keys,
        cache.values,
        attn_mask=atorch.causal_mask(2, 6),
        enable_gqa=True,
    )
    assert_close(wrong, top_left)
    assert not torch.allclose(wrong, heads, atol=1e-3)


# --- layers -------------------------------------------------------------------


def test_layer_param_shapes_and_sizes():
    for module, _ in ALL.values():
        layer = module.GroupedQueryAttention(8, 2, 32)
        shapes = {n: tuple(p.shape) for n, p in layer.params.items()}
        assert shapes == {
            "W_q": (32, 32),
            "W_k": (32, 8),
            "W_v": (32, 8),
            "W_o": (32, 32),
            "b_q": (32,),
            "b_k": (8,),
            "b_v": (8,),
            "b_o": (32,),
        }, module.__name__
        assert layer.head_dim == 4


# --- bad input: the same ValueError in all three ------------------------------------


def _raises(fn, match, error=ValueError):
    for module, convert in ALL.values():
        with pytest.raises(error, match=match):
            fn(module, convert)


def test_num_heads_not_divisible_by_num_kv_heads():
    _raises(
        lambda m, c: m.GroupedQueryAttention(6, 4, 12), r"num_heads=6 .* num_kv_heads=4"
    )
    _raises(lambda m, c: m.repeat_kv(c(np.zeros((1, 4, 2, 3))), 6), r"\[1, 2, 3, 6\]")
    _raises(lambda m, c: m.GroupedQueryAttention(4, 0, 12), "num_kv_heads must be >= 1")


def test_bad_gqa_weights(rng):
    params = gqa_params(rng, 8, 4, 2, 3)
    x = rng.normal(size=(1, 3, 8))
    _raises(
        lambda m, c: m.grouped_query_attention(c(x), c(x), c(x), conv(params, c), 4, 1),
        r"W_k must have num_kv_heads \* head_dim = 1 \* 3 = 3 columns",
    )
    odd = {**params, "W_q": rng.normal(size=(8, 10))}
    _raises(
        lambda m, c: m.grouped_query_attention(c(x), c(x), c(x), conv(odd, c), 4, 2),
        "not a multiple of num_heads=4",
    )


def test_cache_that_does_not_fit_the_step(rng):
    params = gqa_params(rng, 8, 4, 2, 3)
    x = rng.normal(size=(2, 3, 8))
    one = rng.normal(size=(1, 1, 8))

    def step(m, c, cache_from, heads=2, mask=None, params=params):
        p = conv(params, c)
        _, cache = m.decode_step(c(cache_from), p, 4, heads)
        return m.decode_step(
            c(one if cache_from is x else x[:, :1]),
            p,
            4,
            heads,
            cache,
            None if mask is None else c(mask),
        )

    # batch: a cache of 2 sequences, a step of 1
    _raises(lambda m, c: step(m, c, x), r"expected .* = \(1, 2, 3, 3\) .* batch 1")
    # a cache from a layer with other kv heads
    mqa = gqa_params(rng, 8, 4, 1, 3)
    _raises(
        lambda m, c: m.decode_step(
            c(x[:, 1:]),
            conv(params, c),
            4,
            2,
            m.decode_step(c(x[:, :1]), conv(mqa, c), 4, 1)[1],
        ),
        "num_kv_heads=2, head_dim=3",
    )
    # a mask whose key axis disagrees with t_past + n_new
    _raises(
        lambda m, c: m.decode_step(
            c(x[:, 2:]),
            conv(params, c),
            4,
            2,
            m.decode_step(c(x[:, :2]), conv(params, c), 4, 2)[1],
            c(anp.causal_mask(1, 2, align="bottom_right")),
        ),
        r"t_past=2 and x adds n_new=1: .* t_past \+ n_new = 3",
    )
    # keys and values of different lengths
    _raises(
        lambda m, c: m.KVCache(c(np.zeros((1, 2, 3, 4))), c(np.zeros((1, 2, 2, 4)))),
        "same shape",
    )
    # new keys that do not continue the cache
    _raises(
        lambda m, c: m.KVCache(
            c(np.zeros((1, 2, 3, 4))), c(np.zeros((1, 2, 3, 4)))
        ).append(c(np.zeros((1, 2, 1, 5))), c(np.zeros((1, 2, 1, 5)))),
        "do not continue the cache",
    )
    # no new token
    _raises(
        lambda m, c: m.decode_step(c(x[:, :0]), conv(params, c), 4, 2),
        "at least one new token",
    )


def test_cache_of_another_framework_or_dtype_is_refused(rng):
    params = gqa_params(rng, 8, 4, 2, 3)
    x = rng.normal(size=(1, 2, 8))
    _, np_cache = anp.decode_step(x, params, 4, 2)
    with pytest.raises(TypeError, match="attncourse.torch KVCache"):
        atorch.decode_step(to_torch(x), conv(params, to_torch), 4, 2, np_cache)
    with pytest.raises(TypeError, match="attncourse.tf KVCache"):
        atf.decode_step(to_tf(x), conv(params, to_tf), 4, 2, (1, 2))
    cache64 = atorch.KVCache(
        to_torch(np_cache.keys, torch.float64), to_torch(np_cache.values, torch.float64)
    )
    with pytest.raises(TypeError, match="same dtype"):
        atorch.decode_step(to_torch(x), conv(params, to_torch), 4, 2, cache64)


def test_kv_cache_bytes_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1"):
        anp.kv_cache_bytes(2, 0, 64, 10)
    with pytest.raises(TypeError, match="seq_len must be an int"):
        anp.kv_cache_bytes(2, 1, 64, 10.5)
