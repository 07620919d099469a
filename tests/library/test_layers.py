"""Attention layers: NumPy reference, Keras / PyTorch twins, weights, gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

FW = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}
SETTINGS = settings(max_examples=25, deadline=None)
SELF = ("SelfAttention", "SelfAttentionDense")
TWO = ("CrossAttention", "StatisticalAttention")


def make(mod, name, d_k, d_v, dims):
    """A layer of class ``name`` from ``mod`` with known input sizes."""
    return getattr(mod, name)(d_k, d_v, *dims)


def copy_weights(src, dst_mod, dst):
    dst_mod.set_params(dst, anp.get_params(src))


def maybe(conv, x):
    return None if x is None else conv(x)


@st.composite
def layer_problems(draw, name):
    b, n_a, n_b = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 5)),
        draw(st.integers(1, 5)),
    )
    dim_a, dim_b = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if name in SELF:
        inputs, dims, scores = [rng.normal(size=(b, n_a, dim_a))], (dim_a,), (n_a, n_a)
    elif name == "CrossAttention":
        inputs = [rng.normal(size=(b, n_a, dim_a)), rng.normal(size=(b, n_b, dim_b))]
        dims, scores = (dim_a, dim_b), (n_a, n_b)
    else:
        inputs = [rng.normal(size=(b, n_a, dim_a)), rng.normal(size=(b, n_a, dim_b))]
        dims, scores = (dim_a, dim_b), (n_a, n_a)
    mask_shape = draw(st.sampled_from([None, (b, *scores), (b, 1, scores[1]), scores]))
    mask = None if mask_shape is None else rng.random(mask_shape) < 0.7
    return inputs, mask, d_k, d_v, dims, int(rng.integers(0, 1000))


def _parity(name, problem):
    inputs, mask, d_k, d_v, dims, seed = problem
    ref_layer = anp.__dict__[name](d_k, d_v, *dims, seed=seed)
    ref_out, ref_w = ref_layer(*inputs, attention_mask=mask, return_weights=True)
    assert ref_out.shape == (
        *inputs[-1 if name == "StatisticalAttention" else 0].shape[:2],
        d_v,
    )
    for mod, conv in FW.values():
        layer = make(mod, name, d_k, d_v, dims)
        copy_weights(ref_layer, mod, layer)
        out, w = layer(
            *[conv(x) for x in inputs],
            attention_mask=maybe(conv, mask),
            return_weights=True,
        )
        assert_close(out, ref_out, what=f"{mod.__name__}.{name}")
        assert_close(w, ref_w, what=f"{mod.__name__}.{name}")
        plain = layer(*[conv(x) for x in inputs], attention_mask=maybe(conv, mask))
        assert_close(plain, ref_out)


@SETTINGS
@given(layer_problems("SelfAttention"))
def test_custom_attention_parity(problem):
    _parity("SelfAttention", problem)


@SETTINGS
@given(layer_problems("SelfAttentionDense"))
def test_custom_attention_dense_parity(problem):
    _parity("SelfAttentionDense", problem)


@SETTINGS
@given(layer_problems("CrossAttention"))
def test_cross_attention_parity(problem):
    _parity("CrossAttention", problem)


@SETTINGS
@given(layer_problems("StatisticalAttention"))
def test_statistical_attention_parity(problem):
    _parity("StatisticalAttention", problem)


def test_numpy_layer_is_the_formula(rng):
    x = rng.normal(size=(2, 4, 3))
    layer = anp.SelfAttention(5, 6, 3, seed=1)
    q, k, v = x @ layer.W_q, x @ layer.W_k, x @ layer.W_v
    w = anp.masked_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(5))
    np.testing.assert_allclose(layer(x), w @ v)


def test_statistical_attention_is_q_from_b_k_from_a_v_from_both(rng):
    a, b = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 2))
    layer = anp.StatisticalAttention(5, 6, 3, 2)
    assert {k: v.shape for k, v in anp.get_params(layer).items()} == {
        "W_q": (2, 5),
        "W_k": (3, 5),
        "W_v": (5, 6),
    }
    ref = anp.scaled_dot_product_attention(
        b @ layer.W_q, a @ layer.W_k, np.concatenate([a, b], -1) @ layer.W_v
    )[0]
    np.testing.assert_allclose(layer(a, b), ref)


# --- gradients: TF tape vs torch autograd, wrt inputs and weights ------------


def _torch_kernel_grads(layer):
    grads = {}
    for name in ("W_q", "W_k", "W_v"):
        part = getattr(layer, name)
        grads[name] = (
            part.weight.grad.T if isinstance(part, torch.nn.Linear) else part.grad
        )
    return grads


@pytest.mark.parametrize("name", [*SELF, *TWO])
@pytest.mark.parametrize("seed", range(3))
def test_layer_gradients_agree(name, seed):
    rng = np.random.default_rng(seed)
    b, n, m = 2, 4, 3
    shapes = {
        "CrossAttention": [(b, n, 3), (b, m, 5)],
        "StatisticalAttention": [(b, n, 3), (b, n, 5)],
    }.get(name, [(b, n, 3)])
    inputs = [rng.normal(size=s) for s in shapes]
    dims = tuple(s[-1] for s in shapes)
    mask = rng.random((b, 1, shapes[-1][1] if name == "CrossAttention" else n)) < 0.8
    ref = anp.__dict__[name](4, 2, *dims, seed=seed)
    d_v = 2
    cot = rng.normal(size=(b, n, d_v))

    tf_layer = make(atf, name, 4, d_v, dims)
    copy_weights(ref, atf, tf_layer)
    xs = [to_tf(x) for x in inputs]
    kernels = list(tf_layer.params.values())
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.reduce_sum(tf_layer(*xs, attention_mask=to_tf(mask)) * to_tf(cot))
    g_tf = tape.gradient(loss, xs + kernels)

    pt_layer = make(atorch, name, 4, d_v, dims)
    copy_weights(ref, atorch, pt_layer)
    ts = [to_torch(x).requires_grad_() for x in inputs]
    (pt_layer(*ts, attention_mask=to_torch(mask)) * to_torch(cot)).sum().backward()
    g_pt = [t.grad for t in ts] + list(_torch_kernel_grads(pt_layer).values())

    for i, (a, c) in enumerate(zip(g_tf, g_pt, strict=True)):
        assert np.any(to_np(a) != 0)
        assert_close(a, c, what=f"{name} gradient {i}")


# --- Keras specifics ----------------------------------------------------------


@pytest.mark.parametrize("name", SELF)
def test_keras_summary_shape_and_params(name):
    inputs = keras.Input(shape=(10, 64))
    outputs = getattr(atf, name)(d_k=128, d_v=256)(inputs)
    model = keras.Model(inputs, outputs)
    lines = []
    model.summary(print_fn=lambda line, *a, **k: lines.append(line))
    text = "\n".join(lines)
    assert tuple(outputs.shape) == (None, 10, 256)
    assert "(None, 10, 256)" in text and "32,768" in text
    assert model.count_params() == 64 * 128 * 2 + 64 * 256 == 32_768


def test_keras_weight_names_and_initializer():
    layer = atf.SelfAttention(3, 4, input_dim=5)
    assert [w.name for w in layer.weights] == ["W_q", "W_k", "W_v"]
    assert [tuple(w.shape) for w in layer.weights] == [(5, 3), (5, 3), (5, 4)]
    # Glorot-uniform: inside +-sqrt(6 / (fan_in + fan_out)) and spread over it
    # (std limit / sqrt(3)); all-zero or constant weights fail. 50 draws.
    scaled = []
    for w in layer.weights:
        limit = np.sqrt(6 / sum(w.shape))
        assert np.all(np.abs(w.numpy()) <= limit), w.name
        scaled.append(w.numpy().ravel() / limit)
    scaled = np.concatenate(scaled)
    assert 0.4 < scaled.std() < 0.75 and np.abs(scaled).max() > 0.5, scaled
    dense = atf.SelfAttentionDense(3, 4, input_dim=5)
    assert [sub.name for sub in (dense.W_q, dense.W_k, dense.W_v)] == [
        "W_q",
        "W_k",
        "W_v",
    ]
    assert dense.W_q.use_bias is False and dense.count_params() == 5 * 3 * 2 + 5 * 4


@pytest.mark.parametrize("name", [*SELF, *TWO])
def test_keras_get_config_roundtrip(name):
    dims = (5,) if name in SELF else (5, 6)
    layer = make(atf, name, 3, 4, dims)
    clone = type(layer).from_config(layer.get_config())
    assert atf.get_params(clone).keys() == atf.get_params(layer).keys()
    for key in ("d_k", "d_v", "input_dim"):
        assert clone.get_config()[key] == layer.get_config()[key]


def test_keras_builds_lazily_from_first_call(rng):
    layer = atf.CrossAttention(3, 4)
    assert not layer.built
    out = layer(to_tf(rng.normal(size=(2, 5, 7))), to_tf(rng.normal(size=(2, 6, 8))))
    assert tuple(out.shape) == (2, 5, 4)
    assert {k: v.shape for k, v in atf.get_params(layer).items()} == {
        "W_q": (7, 3),
        "W_k": (8, 3),
        "W_v": (8, 4),
    }


def test_keras_functional_two_inputs_with_weights():
    a, b = keras.Input(shape=(3, 7)), keras.Input(shape=(3, 8))
    out, w = atf.StatisticalAttention(4, 5)(a, b, return_weights=True)
    assert tuple(out.shape) == (None, 3, 5) and tuple(w.shape) == (None, 3, 3)


# --- PyTorch specifics ---------------------------------------------------------


def test_torch_requires_input_dim():
    for cls in (
        atorch.SelfAttention,
        atorch.SelfAttentionDense,
        atorch.CrossAttention,
        atorch.StatisticalAttention,
    ):
        with pytest.raises(ValueError, match="input_dim is required"):
            cls(3, 4)


def test_torch_linear_stores_transposed_weight():
    layer = atorch.SelfAttentionDense(3, 4, input_dim=5)
    assert tuple(layer.W_q.weight.shape) == (3, 5)  # (out, in)
    assert atorch.get_params(layer)["W_q"].shape == (5, 3)  # (in, out)
    assert sum(p.numel() for p in layer.parameters()) == 5 * 3 * 2 + 5 * 4
    plain = atorch.SelfAttention(3, 4, input_dim=5)
    assert [n for n, _ in plain.named_parameters()] == ["W_q", "W_k", "W_v"]


# --- get/set_params -------------------------------------------------------

ALL_MODS = {"numpy": anp, **{k: m for k, (m, _) in FW.items()}}


@pytest.mark.parametrize("fw", ALL_MODS)
@pytest.mark.parametrize("name", [*SELF, *TWO])
def test_weights_roundtrip_and_seed(fw, name, rng):
    mod = ALL_MODS[fw]
    dims = (5,) if name in SELF else (5, 6)
    layer = make(mod, name, 3, 4, dims)
    new = {k: rng.normal(size=v.shape) for k, v in mod.get_params(layer).items()}
    mod.set_params(layer, new)
    for k, v in mod.get_params(layer).items():
        np.testing.assert_allclose(v, new[k], rtol=1e-6)
    a = mod.get_params(getattr(mod, name)(3, 4, *dims, seed=7))
    b = mod.get_params(getattr(mod, name)(3, 4, *dims, seed=7))
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("fw", ALL_MODS)
def test_set_weights_rejects_bad_dicts(fw, rng):
    mod = ALL_MODS[fw]
    layer = mod.SelfAttention(3, 4, 5)
    good = mod.get_params(layer)
    with pytest.raises(ValueError, match=r"exactly the keys \['W_k', 'W_q', 'W_v'\]"):
        mod.set_params(layer, {"W_q": good["W_q"], "W_k": good["W_k"]})
    with pytest.raises(ValueError, match="got .*'W_o'"):
        mod.set_params(layer, {**good, "W_o": good["W_q"]})
    bad = {**good, "W_v": np.zeros((5, 3))}
    with pytest.raises(
        ValueError,
        match=r"weight W_v must have shape \(5, 4\), "
        r"got \(5, 3\)",
    ):
        mod.set_params(layer, bad)
    np.testing.assert_allclose(mod.get_params(layer)["W_q"], good["W_q"])
