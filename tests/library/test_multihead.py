"""Multi-head attention: NumPy reference, TF and torch agree; masks; gradients."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
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

FRAMEWORKS = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}


def conv(params, convert):
    return {k: convert(v) for k, v in params.items()}


@settings(max_examples=10, deadline=None)
@given(
    batch=st.integers(1, 3),
    n=st.integers(1, 5),
    heads=st.integers(1, 4),
    d_head=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_split_merge_heads_parity_and_inverse(batch, n, heads, d_head, seed):
    x = np.random.default_rng(seed).normal(size=(batch, n, heads * d_head))
    split = anp.split_heads(x, heads)
    assert split.shape == (batch, heads, n, d_head)
    # head h holds features h * d_head ... (h + 1) * d_head - 1
    assert_close(split[:, -1], x[..., (heads - 1) * d_head :])
    assert_close(anp.merge_heads(split), x)
    for module, convert in FRAMEWORKS.values():
        got = module.split_heads(convert(x), heads)
        assert_close(got, split)
        assert_close(module.merge_heads(got), x)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mask_kind", [None, "padding", "causal", "full3d", "per_head"])
def test_multi_head_attention_parity(rng, bias, mask_kind):
    heads = 2
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, d_model=8, d_out=5, bias=bias)
    mask = make_mask(rng, mask_kind, 2, heads, 3, 5)
    out, w = anp.multi_head_attention(q, k, v, params, heads, mask)
    assert out.shape == (2, 3, 5) and w.shape == (2, heads, 3, 5)
    assert_close(w.sum(-1), np.ones((2, heads, 3)))
    if mask is not None:
        full = np.broadcast_to(mask[:, None] if mask.ndim == 3 else mask, w.shape)
        assert np.all(w[~full] == 0)
    for module, convert in FRAMEWORKS.values():
        got_out, got_w = module.multi_head_attention(
            convert(q),
            convert(k),
            convert(v),
            conv(params, convert),
            heads,
            None if mask is None else convert(mask),
        )
        assert_close(got_out, out, what=f"{module.__name__} outputs")
        assert_close(got_w, w, what=f"{module.__name__} weights")


def test_each_head_is_scaled_dot_product_attention(rng):
    """Cross-check with the single-head reference on the projected, split inputs."""
    heads = 4
    q, k, v = inputs(rng, d_q=8)
    params = make_params(rng, 8, 4, 7, d_model=8, d_out=8)
    mask = make_mask(rng, "padding", 2, heads, 3, 5)
    out, w = anp.multi_head_attention(q, k, v, params, heads, mask)
    proj = [
        anp.split_heads(x @ params[f"W_{c}"] + params[f"b_{c}"], heads)
        for x, c in ((q, "q"), (k, "k"), (v, "v"))
    ]
    per_head = [
        anp.scaled_dot_product_attention(*(p[:, h] for p in proj), mask=mask)
        for h in range(heads)
    ]
    assert_close(w, np.stack([pw for _, pw in per_head], 1))
    concat = np.concatenate([po for po, _ in per_head], -1)
    assert_close(out, concat @ params["W_o"] + params["b_o"])


def test_3d_mask_means_batch_queries_keys(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 8)
    mask = make_mask(rng, "full3d", 2, 2, 3, 5)
    a = anp.multi_head_attention(q, k, v, params, 2, mask)[1]
    b = anp.multi_head_attention(q, k, v, params, 2, mask[:, None])[1]
    assert_close(a, b)


def test_fully_masked_row_gets_zero_weights(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 8)
    mask = np.ones((2, 3, 5), bool)
    mask[1, 2] = False
    for module, convert in [(anp, np.asarray), *FRAMEWORKS.values()]:
        out, w = module.multi_head_attention(
            convert(q), convert(k), convert(v), conv(params, convert), 2, convert(mask)
        )
        assert np.all(to_np(w)[1, :, 2] == 0)
        assert_close(to_np(out)[1, 2], params["b_o"])  # nothing attended: bias only


@pytest.mark.parametrize("use_bias", [True, False])
def test_layers_agree_with_same_weights(rng, use_bias):
    heads, dims = 2, (6, 4, 7)
    ref = anp.MultiHeadAttention(heads, 8, d_out=5, use_bias=use_bias, input_dims=dims)
    q, k, v = inputs(rng)
    mask = make_mask(rng, "padding", 2, heads, 3, 5)
    out, w = ref(q, k, v, attention_mask=mask, return_weights=True)
    assert_close(ref(q, k, v, attention_mask=mask), out)
    keras_layer = atf.MultiHeadAttention(heads, 8, d_out=5, use_bias=use_bias)
    keras_layer(to_tf(q), to_tf(k), to_tf(v))  # Keras infers input_dims
    assert keras_layer.input_dims == dims
    torch_layer = atorch.MultiHeadAttention(
        heads, 8, d_out=5, use_bias=use_bias, input_dims=dims
    )
    for layer, (module, convert) in (
        (keras_layer, FRAMEWORKS["tf"]),
        (torch_layer, FRAMEWORKS["torch"]),
    ):
        module.set_params(layer, anp.get_params(ref))
        got_out, got_w = layer(
            convert(q),
            convert(k),
            convert(v),
            attention_mask=convert(mask),
            return_weights=True,
        )
        assert_close(got_out, out)
        assert_close(got_w, w)


def test_layer_parameter_counts():
    # (6 + 4 + 7) * 8 + 8 * 5 matrix entries, 3 * 8 + 5 biases
    expected = 17 * 8 + 8 * 5 + 3 * 8 + 5
    ref = anp.MultiHeadAttention(2, 8, d_out=5, input_dims=(6, 4, 7))
    assert sum(p.size for p in ref.params.values()) == expected
    keras_layer = atf.MultiHeadAttention(2, 8, d_out=5, input_dims=(6, 4, 7))
    assert keras_layer.count_params() == expected
    torch_layer = atorch.MultiHeadAttention(2, 8, d_out=5, input_dims=(6, 4, 7))
    assert sum(p.numel() for p in torch_layer.parameters()) == expected


def test_keras_layer_in_a_functional_model():
    import keras

    q, kv = keras.Input((3, 6)), keras.Input((5, 4))
    out = atf.MultiHeadAttention(2, 8, d_out=5)(q, kv, kv)
    model = keras.Model([q, kv], out)
    assert tuple(model.output.shape) == (None, 3, 5)


def test_gradients_tf_and_torch_agree(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 5)
    mask = make_mask(rng, "padding", 2, 2, 3, 5)
    probe = rng.normal(size=(2, 3, 5))  # loss = sum(outputs * probe)

    tf_vars = [tf.Variable(to_tf(x)) for x in (q, k, v)]
    tf_params = {n: tf.Variable(to_tf(p)) for n, p in params.items()}
    with tf.GradientTape() as tape:
        out, _ = atf.multi_head_attention(*tf_vars, tf_params, 2, to_tf(mask))
        loss = tf.reduce_sum(out * to_tf(probe))
    tf_grads = tape.gradient(loss, [*tf_vars, *tf_params.values()])

    t_vars = [to_torch(x).requires_grad_() for x in (q, k, v)]
    t_params = {n: to_torch(p).requires_grad_() for n, p in params.items()}
    out, _ = atorch.multi_head_attention(*t_vars, t_params, 2, to_torch(mask))
    (out * to_torch(probe)).sum().backward()
    t_grads = [t.grad for t in (*t_vars, *t_params.values())]

    names = ["queries", "keys", "values", *params]
    for name, g_tf, g_t in zip(names, tf_grads, t_grads, strict=True):
        assert_close(g_tf, g_t, what=name)
    # padded keys get no gradient through the attention
    assert np.all(to_np(t_grads[1])[~mask[:, 0]] == 0)


# --- bad input: same ValueError, same message, in all three ---------------------


def _message(fn):
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


def assert_same_error(make_call):
    """make_call(module, convert) raises the NumPy reference's ValueError."""
    expected = _message(lambda: make_call(anp, np.asarray))
    for module, convert in FRAMEWORKS.values():
        assert expected in _message(lambda m=module, c=convert: make_call(m, c))
    return expected


def test_d_model_not_divisible_by_heads(rng):
    for make in (
        lambda m, c: m.MultiHeadAttention(4, 6, input_dims=(6, 6, 6)),
        lambda m, c: m.split_heads(c(rng.normal(size=(2, 3, 6))), 4),
        lambda m, c: m.multi_head_attention(
            *(c(x) for x in inputs(rng)), conv(make_params(rng, 6, 4, 7, 6, 6), c), 4
        ),
    ):
        msg = assert_same_error(make)
        assert "d_model=6" in msg and "num_heads=4" in msg


def test_wrong_input_dims(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 8)

    def layer_call(m, c):
        layer = m.MultiHeadAttention(2, 8, input_dims=(6, 4, 7))
        return layer(c(q), c(rng.normal(size=(2, 5, 3))), c(v))

    msg = assert_same_error(layer_call)
    assert "keys of shape (2, 5, 3) have 3 features" in msg
    assert "W_k of shape (4, 8) expects 4" in msg
    msg = assert_same_error(
        lambda m, c: m.multi_head_attention(
            c(q[..., :5]), c(k), c(v), conv(params, c), 2
        )
    )
    assert "queries of shape (2, 3, 5)" in msg


def test_input_dims_required_for_numpy_and_torch():
    for module in (anp, atorch):
        msg = _message(lambda m=module: m.MultiHeadAttention(2, 8))
        assert "input_dims=(d_q_in, d_k_in, d_v_in) is required" in msg


def test_bad_mask_shape(rng):
    q, k, v = inputs(rng)
    params = make_params(rng, 6, 4, 7, 8, 8)
    msg = assert_same_error(
        lambda m, c: m.multi_head_attention(
            c(q), c(k), c(v), conv(params, c), 2, c(np.ones((4, 5), bool))
        )
    )
    assert "(4, 5) does not broadcast" in msg


def _dropout_layers(rate):
    """The TF and torch layers with one set of weights and attention dropout."""
    ref = anp.MultiHeadAttention(2, 8, input_dims=(8, 8, 8), dropout=rate)
    layer_tf = atf.MultiHeadAttention(2, 8, input_dims=(8, 8, 8), dropout=rate)
    layer_pt = atorch.MultiHeadAttention(2, 8, input_dims=(8, 8, 8), dropout=rate)
    atf.set_params(layer_tf, anp.get_params(ref))
    atorch.set_params(layer_pt, anp.get_params(ref))
    return ref, layer_tf, layer_pt


def test_attention_dropout_only_while_training(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    ref, layer_tf, layer_pt = _dropout_layers(0.5)
    expected, expected_w = ref(x, x, x, return_weights=True)
    # inference: dropout is the identity, as if the rate were 0
    assert_close(layer_tf(x, x, x), expected, atol=1e-5)
    layer_pt.eval()
    assert_close(layer_pt(*(to_torch(x),) * 3), expected, atol=1e-5)
    # training: the output changes, the returned weights are the softmax's
    out_tf, w_tf = layer_tf(x, x, x, return_weights=True, training=True)
    layer_pt.train()
    out_pt, w_pt = layer_pt(*(to_torch(x),) * 3, return_weights=True)
    for out, w in ((out_tf, w_tf), (out_pt, w_pt)):
        assert np.abs(to_np(out) - expected).max() > 1e-3
        assert_close(w, expected_w, atol=1e-5)


@pytest.mark.parametrize("rate", [-0.1, 1.0, True])
def test_bad_dropout_rate(rate):
    for module in (anp, atf, atorch):
        with pytest.raises(ValueError, match="dropout"):
            module.MultiHeadAttention(2, 8, input_dims=(8, 8, 8), dropout=rate)


def test_keras_config_keeps_the_dropout_rate():
    layer = atf.MultiHeadAttention(2, 8, input_dims=(8, 8, 8), dropout=0.25)
    assert atf.MultiHeadAttention.from_config(layer.get_config()).dropout == 0.25
