"""The Transformer block: norms, feed-forward, encoder and decoder blocks.

NumPy (float64 reference) == TensorFlow == PyTorch in outputs and gradients;
the blocks equal torch.nn.TransformerEncoderLayer / DecoderLayer with copied
weights (both norm_first settings, relu and gelu); our norms equal the
frameworks' LayerNorm and RMSNorm layers; parameter counts by formula equal
the frameworks' counts; bad input raises ValueError naming the problem.
"""

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

D, H, F = 8, 2, 12  # d_model, num_heads, d_ff
CASES = [(norm, act) for norm in ("pre", "post") for act in ("relu", "gelu")]


def block_params(rng, cross=False, d=D, f=F):
    """Random params of the block layout: every entry non-trivial."""
    shapes = anp.block_param_shapes(d, f, cross=cross)
    params = {}
    for name, shape in shapes.items():
        scale = 1.0 / np.sqrt(shape[0]) if len(shape) == 2 else 0.3
        params[name] = rng.normal(size=shape) * scale
        if name.endswith("gamma"):
            params[name] += 1.0
    return params


def f64_tf(params):
    return {k: tf.Variable(v, dtype=tf.float64) for k, v in params.items()}


def f64_torch(params):
    return {
        k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
        for k, v in params.items()
    }


def padding_mask():
    return anp.sequence_mask(np.array([5, 3]), 5)  # (2, 1, 5), True = attend


# --- NumPy == TF == torch ------------------------------------------------------


def test_norms_and_ffn_parity(rng):
    x = rng.normal(size=(2, 3, D)) * 3 + 1
    gamma, beta = rng.normal(size=D), rng.normal(size=D)
    ffn = {k[4:]: v for k, v in block_params(rng).items() if k.startswith("ffn.")}
    for act in ("relu", "gelu"):
        ref = anp.feed_forward(x, ffn, act)
        assert ref.shape == x.shape
        for module, conv in ((atf, tf.constant), (atorch, torch.tensor)):
            assert_close(
                module.layer_norm(conv(x), gamma, beta), anp.layer_norm(x, gamma, beta)
            )
            assert_close(module.rms_norm(conv(x), gamma), anp.rms_norm(x, gamma))
            assert_close(module.feed_forward(conv(x), ffn, act), ref)
            prefixed = {f"ffn.{k}": v for k, v in ffn.items()}
            assert_close(module.feed_forward(conv(x), prefixed, act), ref)
    # the NumPy reference itself, written out
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert_close(
        anp.layer_norm(x, gamma, beta, eps=1e-3),
        (x - mean) / np.sqrt(var + 1e-3) * gamma + beta,
        atol=1e-12,
    )
    rms = np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
    assert_close(anp.rms_norm(x, gamma), x / rms * gamma, atol=1e-12)
    g = anp.feed_forward(
        np.array([-1.0, 0.0, 1.0]),
        {"W_1": np.eye(3), "b_1": np.zeros(3), "W_2": np.eye(3), "b_2": np.zeros(3)},
        "gelu",
    )
    assert_close(g, [-0.15865525393145707, 0.0, 0.8413447460685429], atol=1e-12)


@pytest.mark.parametrize("norm,act", CASES)
def test_block_parity_outputs(rng, norm, act):
    params = block_params(rng)
    x = rng.normal(size=(2, 5, D))
    ref, w = anp.transformer_block(
        x, params, H, norm=norm, activation=act, mask=padding_mask()
    )
    assert ref.shape == x.shape and w.shape == (2, H, 5, 5)
    assert np.all(w[1, :, :, 3:] == 0)  # padding respected
    for module, conv in ((atf, tf.constant), (atorch, torch.tensor)):
        for dtype_x in (np.float32, np.float64):
            out, weights = module.transformer_block(
                conv(x.astype(dtype_x)),
                params,
                H,
                norm=norm,
                activation=act,
                mask=conv(padding_mask()),
            )
            assert_close(out, ref)
            assert_close(weights, w)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_decoder_block_parity(rng, norm):
    params = block_params(rng, cross=True)
    x, memory = rng.normal(size=(2, 4, D)), rng.normal(size=(2, 5, D))
    causal = anp.causal_mask(4)
    ref = anp.decoder_block(
        x, memory, params, H, norm=norm, mask=causal, memory_mask=padding_mask()
    )
    assert [r.shape for r in ref] == [(2, 4, D), (2, H, 4, 4), (2, H, 4, 5)]
    for module, conv in ((atf, tf.constant), (atorch, torch.tensor)):
        got = module.decoder_block(
            conv(x),
            conv(memory),
            params,
            H,
            norm=norm,
            mask=conv(causal),
            memory_mask=conv(padding_mask()),
        )
        for a, b in zip(got, ref, strict=True):
            assert_close(a, b)


def numeric_grad(fn, x, eps=1e-6):
    """Central differences of the scalar fn at x (float64)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (fn(up) - fn(down)) / (2 * eps)
    return grad


@pytest.mark.parametrize("norm,act", CASES)
def test_block_gradients_agree(rng, norm, act):
    """d loss / d x and d loss / d every parameter: TF == torch (float64), and
    both equal NumPy's central differences for x and for ffn.W_1."""
    params = block_params(rng)
    x = rng.normal(size=(2, 4, D))
    target = rng.normal(size=(2, 4, D))
    mask = padding_mask()[:, :, :4]

    def loss_np(x_, p=params):
        y, _ = anp.transformer_block(x_, p, H, norm=norm, activation=act, mask=mask)
        return float(((y - target) ** 2).sum())

    tx, tp = tf.Variable(x), f64_tf(params)
    with tf.GradientTape() as tape:
        y, _ = atf.transformer_block(
            tx, tp, H, norm=norm, activation=act, mask=tf.constant(mask)
        )
        loss = tf.reduce_sum((y - target) ** 2)
    g_tf = tape.gradient(loss, [tx, *tp.values()])
    px, pp = torch.tensor(x, requires_grad=True), f64_torch(params)
    y, _ = atorch.transformer_block(
        px, pp, H, norm=norm, activation=act, mask=torch.tensor(mask)
    )
    ((y - torch.tensor(target)) ** 2).sum().backward()
    g_torch = [px.grad, *(p.grad for p in pp.values())]
    for name, a, b in zip(["x", *params], g_tf, g_torch, strict=True):
        assert_close(a, b, what=name)
    assert_close(g_torch[0], numeric_grad(loss_np, x), atol=1e-5)
    w1 = params["ffn.W_1"]
    num = numeric_grad(lambda w: loss_np(x, {**params, "ffn.W_1": w}), w1)
    assert_close(pp["ffn.W_1"].grad, num, atol=1e-5)
    assert np.abs(num).max() > 1e-3  # a gradient that could have been wrong


def test_layers_share_parameters_across_frameworks(rng):
    """get/set_params move one flat dict between the three layers; the causal
    layer equals the function with a causal mask."""
    params = block_params(rng)
    x = rng.normal(size=(2, 5, D))
    ref, w = anp.transformer_block(x, params, H, mask=anp.causal_mask(5))
    layers = {
        "numpy": anp.TransformerBlock(D, H, F, causal=True),
        "tf": atf.TransformerBlock(D, H, F, causal=True),
        "torch": atorch.TransformerBlock(D, H, F, causal=True),
    }
    anp.set_params(layers["numpy"], params)
    atf.set_params(layers["tf"], params)
    atorch.set_params(layers["torch"], params)
    for name, layer in layers.items():
        inputs = {
            "numpy": x,
            "tf": tf.constant(x, tf.float32),
            "torch": torch.tensor(x, dtype=torch.float32),
        }[name]
        out, weights = layer(inputs, return_weights=True)
        assert_close(out, ref, what=name)
        assert_close(weights, w, what=name)
    assert_close(atf.get_params(layers["tf"])["ffn.W_2"], params["ffn.W_2"])
    # every parameter is trained: the frameworks see all of them
    tf_vars = {id(v) for v in layers["tf"].trainable_variables}
    assert tf_vars == {id(v) for v in layers["tf"].params.values()}
    torch_params = {id(p) for p in layers["torch"].parameters()}
    assert torch_params == {id(p) for p in layers["torch"].params.values()}


def test_decoder_layers_and_masks(rng):
    params = block_params(rng, cross=True)
    x, memory = rng.normal(size=(2, 4, D)), rng.normal(size=(2, 5, D))
    pad = padding_mask()
    ref = anp.decoder_block(
        x, memory, params, H, mask=anp.causal_mask(4), memory_mask=pad
    )
    for module, conv in ((anp, np.asarray), (atf, tf.constant), (atorch, torch.tensor)):
        layer = module.DecoderBlock(D, H, F)
        module.set_params(layer, params)
        got = layer(conv(x), conv(memory), memory_mask=conv(pad), return_weights=True)
        for a, b in zip(got, ref, strict=True):
            assert_close(a, b)


# --- equivalence with the built-ins -------------------------------------------


def to_torch_state(params):
    return {k: torch.tensor(v) for k, v in anp.block_params_to_torch(params).items()}


@pytest.mark.parametrize("norm,act", CASES)
def test_equals_torch_transformer_encoder_layer(rng, norm, act):
    params = block_params(rng)
    x = rng.normal(size=(2, 5, D))
    layer = torch.nn.TransformerEncoderLayer(
        D,
        H,
        F,
        dropout=0.0,
        activation=act,
        batch_first=True,
        norm_first=norm == "pre",
        layer_norm_eps=1e-5,
        dtype=torch.float64,
    ).eval()
    layer.load_state_dict(to_torch_state(params))
    pad = padding_mask()
    with torch.no_grad():
        theirs = layer(torch.tensor(x), src_key_padding_mask=torch.tensor(~pad[:, 0]))
        theirs_causal = layer(
            torch.tensor(x), src_mask=torch.tensor(~anp.causal_mask(5)), is_causal=True
        )
    ours, _ = anp.transformer_block(x, params, H, norm=norm, activation=act, mask=pad)
    assert_close(theirs, ours, atol=1e-10)
    ours, _ = anp.transformer_block(
        x, params, H, norm=norm, activation=act, mask=anp.causal_mask(5)
    )
    assert_close(theirs_causal, ours, atol=1e-10)
    # the torch layer of our module equals the built-in too (float32)
    mine = atorch.TransformerBlock(D, H, F, norm=norm, activation=act)
    atorch.set_params(mine, params)
    assert_close(
        mine(torch.tensor(x, dtype=torch.float32), mask=torch.tensor(pad)), theirs
    )


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_equals_torch_transformer_decoder_layer(rng, norm):
    params = block_params(rng, cross=True)
    x, memory = rng.normal(size=(2, 4, D)), rng.normal(size=(2, 5, D))
    layer = torch.nn.TransformerDecoderLayer(
        D,
        H,
        F,
        dropout=0.0,
        batch_first=True,
        norm_first=norm == "pre",
        dtype=torch.float64,
    ).eval()
    layer.load_state_dict(to_torch_state(params))
    with torch.no_grad():
        theirs = layer(
            torch.tensor(x),
            torch.tensor(memory),
            tgt_mask=torch.tensor(~anp.causal_mask(4)),
            memory_key_padding_mask=torch.tensor(~padding_mask()[:, 0]),
        )
    ours = anp.decoder_block(
        x,
        memory,
        params,
        H,
        norm=norm,
        mask=anp.causal_mask(4),
        memory_mask=padding_mask(),
    )
    assert_close(theirs, ours[0], atol=1e-10)


def test_block_params_to_torch_layout(rng):
    params = block_params(rng)
    state = anp.block_params_to_torch(params)
    assert state["linear1.weight"].shape == (F, D)
    assert_close(state["self_attn.in_proj_weight"][D : 2 * D], params["attn.W_k"].T)
    assert_close(state["norm2.bias"], params["norm2.beta"])
    reference = torch.nn.TransformerEncoderLayer(D, H, F, batch_first=True)
    assert sorted(state) == sorted(reference.state_dict())
    assert atf.block_params_to_torch is anp.block_params_to_torch
    assert atorch.block_params_to_torch is anp.block_params_to_torch


def test_norms_equal_the_framework_layers(rng):
    import keras

    x = (rng.normal(size=(2, 3, D)) * 2 + 0.5).astype(np.float32)
    gamma, beta = rng.normal(size=D), rng.normal(size=D)
    for eps in (1e-5, 1e-3):
        ln = keras.layers.LayerNormalization(epsilon=eps)
        ln.build(x.shape)
        ln.set_weights([gamma, beta])
        rms = keras.layers.RMSNormalization(epsilon=eps)
        rms.build(x.shape)
        rms.set_weights([gamma])
        t_ln = torch.nn.LayerNorm(D, eps=eps)
        t_rms = torch.nn.RMSNorm(D, eps=eps)
        with torch.no_grad():
            t_ln.weight.copy_(torch.tensor(gamma))
            t_ln.bias.copy_(torch.tensor(beta))
            t_rms.weight.copy_(torch.tensor(gamma))
            torch_ln, torch_rms = t_ln(torch.tensor(x)), t_rms(torch.tensor(x))
        ref_ln = anp.layer_norm(x.astype(np.float64), gamma, beta, eps=eps)
        ref_rms = anp.rms_norm(x.astype(np.float64), gamma, eps=eps)
        for got in (
            ln(x),
            torch_ln,
            atf.layer_norm(x, gamma, beta, eps=eps),
            atorch.layer_norm(torch.tensor(x), gamma, beta, eps=eps),
        ):
            assert_close(got, ref_ln, what=f"layer norm eps={eps}")
        for got in (
            rms(x),
            torch_rms,
            atf.rms_norm(x, gamma, eps=eps),
            atorch.rms_norm(torch.tensor(x), gamma, eps=eps),
        ):
            assert_close(got, ref_rms, what=f"rms norm eps={eps}")
    # eps matters here: a wrong eps would fail (small-variance rows)
    tiny = x * 1e-2
    assert (
        np.abs(
            anp.layer_norm(tiny, gamma, beta, eps=1e-3)
            - anp.layer_norm(tiny, gamma, beta, eps=1e-5)
        ).max()
        > 1e-2
    )


def count_formula(d, f, cross=False):
    attn, ffn, norm = 4 * d * d + 4 * d, 2 * d * f + f + d, 2 * d
    return (2 if cross else 1) * attn + ffn + (3 if cross else 2) * norm


@pytest.mark.parametrize("d,h,f", [(8, 2, 12), (16, 4, 64), (6, 3, 6)])
def test_parameter_count(d, h, f):
    shapes = anp.block_param_shapes(d, f)
    assert sum(int(np.prod(s)) for s in shapes.values()) == count_formula(d, f)
    assert atf.TransformerBlock(d, h, f).count_params() == count_formula(d, f)
    n_torch = sum(p.numel() for p in atorch.TransformerBlock(d, h, f).parameters())
    assert n_torch == count_formula(d, f)
    builtin = torch.nn.TransformerEncoderLayer(d, h, f, batch_first=True)
    assert sum(p.numel() for p in builtin.parameters()) == count_formula(d, f)
    n_dec = sum(p.numel() for p in atorch.DecoderBlock(d, h, f).parameters())
    builtin = torch.nn.TransformerDecoderLayer(d, h, f, batch_first=True)
    assert n_dec == count_formula(d, f, True)
    assert sum(p.numel() for p in builtin.parameters()) == n_dec
    assert atf.DecoderBlock(d, h, f).count_params() == n_dec
    layer = anp.DecoderBlock(d, h, f)
    assert sum(v.size for v in layer.params.values()) == n_dec


# --- dropout on the attention weights -----------------------------------------


def test_dropout_only_while_training(rng):
    params = block_params(rng)
    x = rng.normal(size=(2, 6, D)).astype(np.float32)
    ref, _ = anp.transformer_block(x, params, H)
    tf_layer = atf.TransformerBlock(D, H, F, dropout=0.5)
    torch_layer = atorch.TransformerBlock(D, H, F, dropout=0.5)
    atf.set_params(tf_layer, params)
    atorch.set_params(torch_layer, params)
    torch.manual_seed(0)
    xt = torch.tensor(x)
    assert_close(tf_layer(x), ref)
    assert_close(tf_layer(x, training=False), ref)
    assert_close(torch_layer.eval()(xt), ref)
    trained = [to_np(tf_layer(x, training=True)), to_np(torch_layer.train()(xt))]
    for got in trained:
        assert np.abs(got - ref).max() > 1e-2  # dropout changed something
    # returned weights are the undropped distribution
    _, w = torch_layer(xt, return_weights=True)
    assert_close(w.sum(-1), np.ones((2, H, 6)))


def test_dropped_attention_is_unbiased(rng):
    """E[dropout(weights)] = weights, so the attention output averaged over
    many dropout draws approaches the undropped one (the sublayer is linear in
    the weights)."""
    from attncourse.torch.transformer import _attention

    params = {k[5:]: v for k, v in block_params(rng).items() if k[:5] == "attn."}
    x = torch.tensor(rng.normal(size=(1, 5, D)))
    p = {k: torch.tensor(v) for k, v in params.items()}
    ref, _ = _attention(x, x, p, H, None, None)
    torch.manual_seed(1)
    x_many = x.expand(4000, 5, D)
    out, _ = _attention(
        x_many, x_many, p, H, None, lambda w: torch.nn.functional.dropout(w, 0.3, True)
    )
    assert np.abs(to_np(out.mean(0)) - to_np(ref[0])).max() < 0.05
    assert np.abs(to_np(out[0]) - to_np(ref[0])).max() > 0.05


# --- properties --------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(2, 6),
    t=st.integers(0, 5),
    norm=st.sampled_from(["pre", "post"]),
    seed=st.integers(0, 2**16),
)
def test_causal_block_ignores_later_tokens(n, t, norm, seed):
    t = t % n
    rng = np.random.default_rng(seed)
    np.random.seed(seed)
    layer = anp.TransformerBlock(D, H, F, norm=norm, causal=True)
    anp.set_params(layer, block_params(rng))
    x = rng.normal(size=(1, n, D))
    changed = x.copy()
    changed[:, t + 1 :] = rng.normal(size=(1, n - t - 1, D)) * 5
    a, b = layer(x), layer(changed)
    np.testing.assert_allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-12)
    if t + 1 < n:
        assert np.abs(a[:, t + 1 :] - b[:, t + 1 :]).max() > 1e-6
    # the non-causal block does look ahead
    enc = anp.TransformerBlock(D, H, F, norm=norm)
    anp.set_params(enc, layer.params)
    if t + 1 < n:
        assert np.abs(enc(x)[:, : t + 1] - enc(changed)[:, : t + 1]).max() > 1e-6


@settings(max_examples=15, deadline=None)
@given(
    scale=st.floats(0.1, 50.0),
    shift=st.floats(-20.0, 20.0),
    seed=st.integers(0, 2**16),
)
def test_norm_invariances(scale, shift, seed):
    """LayerNorm ignores a positive scale and a shift of each row; RMSNorm
    ignores a positive scale only (it does not centre)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, D))
    gamma, beta = rng.normal(size=D), rng.normal(size=D)
    ln = anp.layer_norm(x, gamma, beta, eps=1e-12)
    np.testing.assert_allclose(
        anp.layer_norm(scale * x + shift, gamma, beta, eps=1e-12), ln, atol=1e-8
    )
    rms = anp.rms_norm(x, gamma, eps=1e-12)
    np.testing.assert_allclose(
        anp.rms_norm(scale * x, gamma, eps=1e-12), rms, atol=1e-8
    )
    if abs(shift) > 1.0:
        assert np.abs(anp.rms_norm(x + shift, gamma, eps=1e-12) - rms).max() > 1e-3


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), norm=st.sampled_from(["pre", "post"]))
def test_encoder_block_is_permutation_equivariant(seed, norm):
    rng = np.random.default_rng(seed)
    params = block_params(rng)
    x = rng.normal(size=(1, 5, D))
    perm = rng.permutation(5)
    out, _ = anp.transformer_block(x, params, H, norm=norm)
    shuffled, _ = anp.transformer_block(x[:, perm], params, H, norm=norm)
    np.testing.assert_allclose(shuffled, out[:, perm], atol=1e-12)


# --- bad input ---------------------------------------------------------------


@pytest.mark.parametrize("module", [anp, atf, atorch], ids=["numpy", "tf", "torch"])
def test_bad_sizes_and_options(module):
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        module.TransformerBlock(8, 3, 16)
    with pytest.raises(ValueError, match="norm must be 'pre'.*got 'middle'"):
        module.TransformerBlock(8, 2, 16, norm="middle")
    with pytest.raises(ValueError, match="activation must be one of"):
        module.DecoderBlock(8, 2, 16, activation="tanh")
    with pytest.raises(ValueError, match="dropout must be in"):
        module.TransformerBlock(8, 2, 16, dropout=1.0)
    with pytest.raises(ValueError, match="d_ff must be >= 1"):
        module.TransformerBlock(8, 2, 0)


@pytest.mark.parametrize(
    "module,conv",
    [(anp, np.asarray), (atf, tf.constant), (atorch, torch.tensor)],
    ids=["numpy", "tf", "torch"],
)
def test_bad_params_and_inputs(rng, module, conv):
    params = block_params(rng)
    x = conv(rng.normal(size=(2, 5, D)))
    missing = {k: v for k, v in params.items() if k != "norm2.beta"}
    with pytest.raises(ValueError, match=r"missing \['norm2.beta'\]"):
        module.transformer_block(x, missing, H)
    with pytest.raises(ValueError, match=r"unknown \['norm3.gamma'\]"):
        module.transformer_block(x, {**params, "norm3.gamma": np.ones(D)}, H)
    unprefixed = {k.replace("attn.", ""): v for k, v in params.items()}
    with pytest.raises(ValueError, match="missing"):
        module.transformer_block(x, unprefixed, H)
    bad = {**params, "ffn.W_2": np.zeros((F, D + 1))}
    with pytest.raises(ValueError, match=r"ffn.W_2 must have shape \(12, 8\)"):
        module.transformer_block(x, bad, H)
    bad = {**params, "attn.W_q": np.zeros((D, D + 2))}
    with pytest.raises(ValueError, match=r"attn.W_q must have shape \(8, 8\)"):
        module.transformer_block(x, bad, H)
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        module.transformer_block(x, params, 3)
    with pytest.raises(ValueError, match="norm must be"):
        module.transformer_block(x, params, H, norm="Pre")
    with pytest.raises(ValueError, match=r"x must have 3 axes"):
        module.transformer_block(conv(np.zeros((5, D))), params, H)
    with pytest.raises(ValueError, match="d_model=8"):
        module.TransformerBlock(D, H, F)(conv(np.zeros((1, 5, D + 1))))
    with pytest.raises(TypeError, match="mask must be boolean"):
        module.TransformerBlock(D, H, F, causal=True)(x, mask=conv(np.ones((5, 5))))
    with pytest.raises(ValueError, match="params of a decoder block"):
        module.decoder_block(x, x, params, H)
    with pytest.raises(ValueError, match="same batch size"):
        module.decoder_block(
            x, conv(np.zeros((3, 4, D))), block_params(rng, cross=True), H
        )
    with pytest.raises(ValueError, match=r"gamma must have shape \(8,\)"):
        module.layer_norm(x, np.ones(D + 1), np.zeros(D))
    with pytest.raises(ValueError, match=r"W_1 must .* \(8, .\*.\), got \(3, 4\)"):
        module.feed_forward(
            x,
            {
                "W_1": np.ones((3, 4)),
                "b_1": np.ones(4),
                "W_2": np.ones((4, 8)),
                "b_2": np.ones(8),
            },
        )
    with pytest.raises(ValueError, match="params must have exactly the keys"):
        module.feed_forward(x, {"W_1": np.ones((8, 4))})


def test_causal_layers_combine_a_padding_mask(rng):
    """causal=True ANDs the causal mask with the caller's mask, in every
    framework, for (batch, 1, n) padding and 4-D per-head masks."""
    params = block_params(rng)
    x = rng.normal(size=(2, 5, D))
    pad = padding_mask()
    per_head = rng.random((2, H, 5, 5)) > 0.3
    per_head[..., 0] = True  # every query keeps a key
    for mask in (pad, per_head):
        both = np.logical_and(
            mask, anp.causal_mask(5)[None] if mask.ndim == 3 else anp.causal_mask(5)
        )
        ref, w = anp.transformer_block(x, params, H, mask=both)
        for module, conv in (
            (anp, np.asarray),
            (atf, tf.constant),
            (atorch, torch.tensor),
        ):
            layer = module.TransformerBlock(D, H, F, causal=True)
            module.set_params(layer, params)
            inputs = conv(x.astype(np.float32)) if module is not anp else x
            out, weights = layer(inputs, mask=conv(mask), return_weights=True)
            assert_close(out, ref)
            assert_close(weights, w)
            assert np.all(
                to_np(weights)[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]]
                == 0
            )


def test_keras_token_masks_become_padding_masks(rng):
    """A mask Keras attaches (Embedding(mask_zero=True)) reaches call() as
    ``mask`` (batch, n) -- or ``memory_mask`` for the decoder's memory: it is
    read as a padding mask over keys, even when batch == n (where reading it
    as (n_q, n_k) would broadcast silently), and the outputs keep it."""
    import keras

    params, dec_params = block_params(rng), block_params(rng, cross=True)
    tokens = np.array([[1, 2, 3, 0], [4, 5, 0, 0], [6, 7, 8, 9], [1, 0, 0, 0]])
    emb = keras.layers.Embedding(10, D, mask_zero=True)
    x = emb(tf.constant(tokens))  # batch == n == 4
    pad = (tokens != 0)[:, None, :]
    ref, w = anp.transformer_block(x.numpy().astype(float), params, H, mask=pad)
    layer = atf.TransformerBlock(D, H, F)
    atf.set_params(layer, params)
    out, weights = layer(x, return_weights=True)
    assert_close(out, ref)
    assert_close(weights, w)
    assert np.array_equal(out._keras_mask.numpy(), tokens != 0)
    dec = atf.DecoderBlock(D, H, F)
    atf.set_params(dec, dec_params)
    ref = anp.decoder_block(
        x.numpy().astype(float),
        x.numpy().astype(float),
        dec_params,
        H,
        mask=anp.causal_mask(4) & pad,
        memory_mask=pad,
    )
    got = dec(x, x, return_weights=True)
    for a, b in zip(got, ref, strict=True):
        assert_close(a, b)
