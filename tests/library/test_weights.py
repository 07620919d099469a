"""Weight bridges: NumPy dicts in and out of every framework, layout
converters, and the built-in GRUs (Keras gate order [z, r, h], torch [r, z, n])
matching our GRU once the weights are transferred."""

import numpy as np
import pytest
import torch
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse.seed import set_seed

FRAMEWORKS = {"numpy": anp, "tf": atf, "torch": atorch}
LAYERS = {
    "MultiHeadAttention": ((2, 8), {"d_out": 5, "input_dims": (6, 4, 7)}),
    "MultiHeadAttention-nobias": ((2, 8), {"use_bias": False, "input_dims": (8, 8, 8)}),
    "GRU": ((3, 4), {}),
    "Encoder": ((11, 3, 4), {}),
    "Encoder-bidirectional": ((11, 3, 4), {"bidirectional": True}),
    **{
        f"Decoder-{a}": ((11, 3, 4, a), {"max_src_len": 6})
        for a in ("scaled_dot", "location", "bahdanau", "luong_dot", "luong_general")
    },
}


def make(module, key):
    args, kwargs = LAYERS[key]
    return getattr(module, key.split("-")[0])(*args, **kwargs)


@pytest.mark.parametrize("key", sorted(LAYERS))
def test_same_names_and_shapes_everywhere_and_round_trip(rng, key):
    ref = anp.get_params(make(anp, key))
    for name, module in FRAMEWORKS.items():
        layer = make(module, key)
        got = module.get_params(layer)
        assert {k: v.shape for k, v in got.items()} == {
            k: v.shape for k, v in ref.items()
        }, name
        new = {k: rng.normal(size=v.shape) for k, v in ref.items()}
        module.set_params(layer, new)
        back = module.get_params(layer)
        for k in new:
            assert_close(back[k], new[k], what=f"{name} {k}")


def test_torch_linear_weights_are_transposed():
    dec = atorch.Decoder(11, 3, 4, "location", max_src_len=6)
    params = atorch.get_params(dec)
    assert params["out.W"].shape == (8, 11)  # canonical (in, out), in = [s; c]
    assert tuple(dec.out.weight.shape) == (11, 8)  # torch (out, in)
    assert_close(params["out.W"], dec.out.weight.T)


def test_weights_move_between_frameworks(rng):
    """Weights initialised in Keras, run in torch, give the same outputs."""
    tokens, state = rng.integers(0, 11, size=(2, 5)), rng.normal(size=(2, 4))
    enc_outputs = rng.normal(size=(2, 6, 4))
    keras_dec = atf.Decoder(11, 3, 4, "luong_general")
    torch_dec = atorch.Decoder(11, 3, 4, "luong_general")
    atorch.set_params(torch_dec, atf.get_params(keras_dec))
    a = keras_dec(to_tf(tokens), to_tf(state), to_tf(enc_outputs))[0]
    b = torch_dec(to_torch(tokens), to_torch(state), to_torch(enc_outputs))[0]
    assert_close(a, b)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_set_params_rejects_wrong_keys_and_shapes(name):
    module = FRAMEWORKS[name]
    layer = make(module, "GRU")
    params = module.get_params(layer)
    with pytest.raises(ValueError, match="must have exactly the keys"):
        module.set_params(layer, {**params, "W_xq": params["W_xr"]})
    with pytest.raises(ValueError, match=r"weight W_xz must have shape \(3, 4\)"):
        module.set_params(layer, {**params, "W_xz": params["W_xz"].T})


def test_get_params_needs_one_of_our_layers():
    for module in FRAMEWORKS.values():
        with pytest.raises(TypeError, match="get_params and set_params work on"):
            module.get_params(object())


def test_unbuilt_keras_mha_has_no_params_yet():
    with pytest.raises(ValueError, match="call it once or pass input_dims"):
        atf.get_params(atf.MultiHeadAttention(2, 8))


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_one_parameter_protocol_for_every_layer(fw):
    """Every course layer has ``params`` in the layout get_params returns, and
    there is no second protocol (kernels(), _param_slots, *_numpy helpers)."""
    module = FRAMEWORKS[fw]
    layers = [make(module, key) for key in sorted(LAYERS)]
    layers += [
        getattr(module, name)(3, 4, 5)
        for name in (
            "SelfAttention",
            "SelfAttentionDense",
            "CrossAttention",
            "StatisticalAttention",
        )
    ]
    for layer in layers:
        got = module.get_params(layer)
        assert got.keys() == dict(layer.params).keys()
        assert all(v.dtype == np.float64 for v in got.values())
        for old in ("kernels", "_param_slots", "weight_shapes"):
            assert not hasattr(layer, old), f"{type(layer).__name__}.{old}"
    for old in (
        "get_weights_numpy",
        "set_weights_numpy",
        "get_params_numpy",
        "set_params_numpy",
    ):
        assert not hasattr(module, old), old


def test_set_params_writes_the_torch_linear_weight_transposed(rng):
    layer = atorch.SelfAttentionDense(3, 4, input_dim=5)
    new = {k: rng.normal(size=v.shape) for k, v in atorch.get_params(layer).items()}
    atorch.set_params(layer, new)
    assert_close(layer.W_v.weight, new["W_v"].T)  # torch stores (out, in)


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_set_params_rejects_integer_arrays_and_changes_nothing(fw, rng):
    module = FRAMEWORKS[fw]
    layer = make(module, "GRU")
    before = module.get_params(layer)
    bad = {
        **{k: rng.normal(size=v.shape) for k, v in before.items()},
        "b_hn": np.zeros(4, np.int64),
    }
    with pytest.raises(TypeError, match="b_hn must be a floating-point tensor"):
        module.set_params(layer, bad)
    for k, v in module.get_params(layer).items():
        np.testing.assert_array_equal(v, before[k])


# --- GRU layouts and the built-in GRUs ---------------------------------------------


def gru_params(rng, d_in=3, hidden=4):
    return {
        k: rng.normal(size=s) * 0.5
        for k, s in anp.seq2seq.gru_param_shapes(d_in, hidden).items()
    }


def test_gru_layout_converters_round_trip(rng):
    p = gru_params(rng)
    kernel, recurrent, bias = anp.gru_params_to_keras(p)
    assert (
        kernel.shape == (3, 12) and recurrent.shape == (4, 12) and bias.shape == (2, 12)
    )
    assert_close(kernel[:, :4], p["W_xz"])  # Keras: z first
    assert_close(recurrent[:, 4:8], p["W_hr"])  # then r
    assert_close(bias[1, 8:], p["b_hn"])  # then h (our n); row 1 = recurrent
    back = anp.gru_params_from_keras(kernel, recurrent, bias)
    sd = anp.gru_params_to_torch(p)
    assert_close(sd["weight_ih_l0"][:4], p["W_xr"].T)  # torch: r first, (out, in)
    assert_close(sd["weight_hh_l0"][4:8], p["W_hz"].T)
    for other in (back, anp.gru_params_from_torch(sd)):
        assert other.keys() == p.keys()
        for k in p:
            assert_close(other[k], p[k])


@pytest.mark.parametrize("valid", [False, True])
def test_keras_gru_matches_ours(rng, valid):
    p = gru_params(rng)
    x, h0 = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4))
    lens = np.array([5, 2])
    out, state = anp.gru(x, h0, p, lens if valid else None)
    layer = atf.to_keras_gru(p)
    mask = to_tf(np.arange(5)[None] < lens[:, None]) if valid else None
    got_out, got_state = layer(to_tf(x), initial_state=to_tf(h0), mask=mask)
    assert_close(got_state, state)
    live = np.arange(5)[None] < (lens if valid else np.array([5, 5]))[:, None]
    assert_close(to_np(got_out)[live], out[live])  # Keras repeats, we zero, padding


@pytest.mark.parametrize("valid", [False, True])
def test_torch_gru_matches_ours(rng, valid):
    p = gru_params(rng)
    x, h0 = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4))
    lens = np.array([5, 2])
    out, state = anp.gru(x, h0, p, lens if valid else None)
    gru = atorch.to_torch_gru(p)
    xs = to_torch(x)
    if valid:
        xs = torch.nn.utils.rnn.pack_padded_sequence(
            xs, torch.as_tensor(lens), batch_first=True
        )
    got_out, got_state = gru(xs, to_torch(h0)[None])
    if valid:
        got_out, _ = torch.nn.utils.rnn.pad_packed_sequence(got_out, batch_first=True)
    assert_close(got_out, out)  # padded positions are zeros in both
    assert_close(got_state[0], state)


def test_built_in_initial_weights_run_in_our_gru(rng):
    """The other direction: a randomly initialised built-in -> canonical -> ours."""
    set_seed(3)
    x, h0 = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4))
    tgru = torch.nn.GRU(3, 4, batch_first=True)
    p = anp.gru_params_from_torch(
        {k: v.detach().numpy() for k, v in tgru.state_dict().items()}
    )
    assert_close(tgru(to_torch(x), to_torch(h0)[None])[0], anp.gru(x, h0, p)[0])
    kgru = atf.to_keras_gru(gru_params(rng))
    kgru.set_weights([w * 0.9 for w in kgru.get_weights()])
    p = anp.gru_params_from_keras(*kgru.get_weights())
    assert_close(kgru(to_tf(x), initial_state=to_tf(h0))[0], anp.gru(x, h0, p)[0])


def test_gate_order_matters(rng):
    """Copying torch's [r, z, n] blocks straight into Keras' [z, r, h] is wrong."""
    p = gru_params(rng)
    x, h0 = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4))
    sd = anp.gru_params_to_torch(p)
    naive = [
        sd["weight_ih_l0"].T,
        sd["weight_hh_l0"].T,
        np.stack([sd["bias_ih_l0"], sd["bias_hh_l0"]]),
    ]
    layer = atf.to_keras_gru(p)
    right = layer(to_tf(x), initial_state=to_tf(h0))[0]
    layer.set_weights(naive)
    wrong = layer(to_tf(x), initial_state=to_tf(h0))[0]
    ours = anp.gru(x, h0, p)[0]
    assert_close(right, ours)
    assert not np.allclose(to_np(wrong), ours, atol=1e-3)


def test_mha_layout_converters(rng):
    from support.arrays import make_params

    p = make_params(rng, 6, 4, 7, d_model=8, d_out=5)
    k = anp.mha_params_to_keras(p, num_heads=2)
    assert k["query/kernel"].shape == (6, 2, 4)
    assert k["attention_output/kernel"].shape == (2, 4, 5)
    assert_close(k["value/kernel"][:, 1], p["W_v"][:, 4:])  # head 1 = features 4..7
    sq = make_params(rng, 8, 8, 8, 8, 8)
    t = anp.mha_params_to_torch(sq)
    assert t["in_proj_weight"].shape == (24, 8)  # [W_q; W_k; W_v] transposed
    assert_close(t["in_proj_weight"][8:16], sq["W_k"].T)
    assert_close(t["in_proj_bias"][16:], sq["b_v"])
    partial = {n: v for n, v in p.items() if n != "b_k"}
    assert_close(anp.mha_params_to_keras(partial, 2)["key/bias"], np.zeros((2, 4)))
