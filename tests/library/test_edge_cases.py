"""Edge cases no other test reached: each test here was seen to fail with the
library line it guards broken (the line is named in each docstring), and to pass
with it restored.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from support.arrays import assert_close, inputs, make_params, to_np, to_tf, to_torch
from support.clipping import assert_clipped, tf_step_norms, torch_step_norms

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse import data

FRAMEWORKS = {
    "numpy": (anp, np.asarray),
    "tf": (atf, to_tf),
    "torch": (atorch, to_torch),
}


# --- cosine score: the eps clamp (scoring.py, _unit) ---------------------------


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_cosine_clamps_norms_below_eps_and_only_those(name):
    """_unit: x / sqrt(max(|x|^2, eps^2)). A query shorter than eps is divided
    by eps, not by its norm (score |q| / eps, not 1); one longer than eps (but
    shorter than sqrt(eps)) is a true unit vector; a zero vector scores 0."""
    module, convert = FRAMEWORKS[name]
    direction = np.array([0.6, 0.8, 0.0])
    keys = convert(direction[None, None, :])
    for norm, expected in [(1e-10, 1e-10 / 1e-8), (1e-5, 1.0), (0.0, 0.0)]:
        queries = convert((norm * direction)[None, None, :])
        score = to_np(module.cosine_score(queries, keys, eps=1e-8))
        assert score.shape == (1, 1, 1)
        assert np.isfinite(score).all(), (norm, score)
        np.testing.assert_allclose(score[0, 0, 0], expected, rtol=1e-4, atol=1e-7)


# --- greedy decoding: padding after EOS (seq2seq.py, greedy_decode) ------------

EOS, BOS, SRC_LEN = 2, 1, 4
# Per step, the token each sequence's decoder would emit: sequence 0 emits EOS
# at step 1 and would go on with 5, 6; sequence 1 emits EOS at step 2.
SCRIPT = [[3, 4], [EOS, 4], [5, EOS], [6, 7]]


class _Encoder:
    def __init__(self, convert):
        self.convert = convert

    def __call__(self, src_tokens, src_valid_lens):
        batch = len(to_np(src_tokens))
        return self.convert(np.ones((batch, SRC_LEN, 3))), None


class _Decoder:
    """Emits SCRIPT, with weights 1/SRC_LEN everywhere (never zero)."""

    def __init__(self, convert):
        self.convert, self.t = convert, 0

    def step(self, tokens, state, enc_outputs, src_mask):
        logits = np.zeros((2, 8))
        logits[[0, 1], SCRIPT[self.t]] = 1.0
        self.t += 1
        return self.convert(logits), state, self.convert(np.full((2, SRC_LEN), 0.25))


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_greedy_decode_pads_with_eos_and_zero_weights_after_eos(name):
    """greedy_decode: tokens = where(done, eos_id, argmax); weights zeroed where
    done; stop once every sequence is done."""
    module, convert = FRAMEWORKS[name]
    src = convert(np.ones((2, SRC_LEN), np.int64))
    decoder = _Decoder(convert)
    tokens, weights = module.greedy_decode(
        _Encoder(convert), decoder, src, None, BOS, EOS, max_len=10
    )
    tokens, weights = to_np(tokens), to_np(weights)
    # three steps: both done after step 2 (0-based), not max_len = 10
    assert decoder.t == 3 and tokens.shape == (2, 3)
    np.testing.assert_array_equal(tokens, [[3, EOS, EOS], [4, 4, EOS]])
    assert weights.shape == (2, 3, SRC_LEN)
    # the EOS step itself keeps its weights; the padding after it has none
    np.testing.assert_array_equal(weights[0, 1], 0.25)
    np.testing.assert_array_equal(weights[0, 2], 0.0)
    np.testing.assert_array_equal(weights[1], 0.25)


# --- per-head masks for nn.MultiheadAttention with batch 1 (weights.py) ---------


def test_per_head_mask_with_batch_one_keeps_each_heads_mask(rng):
    """to_torch_mha_mask: only a mask with batch 1 AND one head is shared (2-D);
    a per-head mask with batch 1 gives (num_heads, n_q, n_k), head h's own."""
    heads = 2
    mask = np.ones((1, heads, 3, 5), bool)
    mask[0, 0, :, 3:] = False  # head 0 ignores keys 3, 4
    mask[0, 1, :, :2] = False  # head 1 ignores keys 0, 1
    got = anp.to_torch_mha_mask(mask, heads)
    assert got.shape == (heads, 3, 5)
    np.testing.assert_array_equal(got, ~mask[0])
    torch_got = atorch.to_torch_mha_mask(to_torch(mask), heads)
    np.testing.assert_array_equal(torch_got.numpy(), ~mask[0])
    # ... and nn.MultiheadAttention then computes what ours does, per head
    q, k, v = inputs(rng, batch=1, d_q=8, d_k=8, d_v=8)
    params = make_params(rng, 8, 8, 8, d_model=8, d_out=8)
    out, w = anp.multi_head_attention(q, k, v, params, heads, mask)
    mha = atorch.to_torch_mha(params, heads)
    got_out, got_w = mha(to_torch(q), to_torch(k), to_torch(v), attn_mask=torch_got,
                         need_weights=True, average_attn_weights=False)  # fmt: skip
    assert_close(got_out, out)
    assert_close(got_w, w)


# --- Keras get_config round trips (multihead.py, positional.py) ----------------


def test_keras_multi_head_attention_config_round_trip(rng):
    """MultiHeadAttention.get_config: every constructor argument, non-default
    values included, comes back; the clone computes the same with the weights."""
    layer = atf.MultiHeadAttention(2, 8, d_out=5, use_bias=False, input_dims=(6, 4, 7))
    config = layer.get_config()
    clone = atf.MultiHeadAttention.from_config(config)
    for key in ("num_heads", "d_model", "d_out", "use_bias", "input_dims"):
        assert getattr(clone, key) == getattr(layer, key), key
    assert clone.get_config() == config
    assert sorted(clone.params) == sorted(layer.params) == ["W_k", "W_o", "W_q", "W_v"]
    clone.set_weights(layer.get_weights())
    q, k, v = (to_tf(x) for x in inputs(rng))
    assert tuple(clone(q, k, v).shape) == (2, 3, 5)
    assert_close(clone(q, k, v), layer(q, k, v))


def test_keras_multi_head_attention_built_lazily_keeps_its_input_dims(rng):
    layer = atf.MultiHeadAttention(2, 8)
    q, k, v = (to_tf(x) for x in inputs(rng))
    layer(q, k, v)
    clone = atf.MultiHeadAttention.from_config(layer.get_config())
    assert clone.input_dims == (6, 4, 7) and clone.d_out == 8 and clone.use_bias
    clone.set_weights(layer.get_weights())
    assert_close(clone(q, k, v), layer(q, k, v))


def test_keras_positional_encoding_config_round_trip():
    """PositionalEncoding.get_config: d_model and max_len (a non-default one)."""
    layer = atf.PositionalEncoding(6, max_len=7, name="pe")
    config = layer.get_config()
    clone = atf.PositionalEncoding.from_config(config)
    assert (clone.d_model, clone.max_len, clone.name) == (6, 7, "pe")
    assert clone.get_config() == config
    x = tf.zeros((1, 7, 6))
    assert_close(clone(x), layer(x))
    with pytest.raises(ValueError):
        clone(tf.zeros((1, 8, 6)))  # max_len survived the round trip


# --- gradient clipping in training (train.py, train_seq2seq) --------------------

CLIP = 1e-3  # far below the unclipped gradient norm of a fresh model


def _tiny(module):
    task = data.make_zh_en_task()
    encoder, decoder = module.build_seq2seq(task, "bahdanau", 4, 4)
    return task, encoder, decoder


def test_torch_training_clips_the_global_gradient_norm(monkeypatch):
    """train_seq2seq: clip_grad_norm_(params, clip_norm) before each Adam step."""
    norms = torch_step_norms(monkeypatch)
    task, encoder, decoder = _tiny(atorch)
    atorch.train_seq2seq(encoder, decoder, task, steps=3, batch_size=8,
                         learning_rate=0.01, clip_norm=CLIP)  # fmt: skip
    assert_clipped(norms(), CLIP, steps=3)


def test_tf_training_clips_the_global_gradient_norm(monkeypatch):
    """train_seq2seq: clip_by_global_norm(grads, clip_norm) before apply."""
    norms = tf_step_norms(monkeypatch)
    task, encoder, decoder = _tiny(atf)
    atf.train_seq2seq(encoder, decoder, task, steps=3, batch_size=8,
                      learning_rate=0.01, clip_norm=CLIP)  # fmt: skip
    assert_clipped(norms(), CLIP, steps=3)


# --- found by mutation testing (bench/mutation_report.md) ----------------------


def test_numpy_positional_encoding_keeps_the_input_dtype_and_names_max_len():
    """PositionalEncoding.__call__: table.astype(x.dtype): float32 stays float32
    (like tf/torch); the default max_len is the other frameworks' 1000."""
    layer = anp.PositionalEncoding(4)
    assert layer.max_len == atf.PositionalEncoding(4).max_len == 1000
    out = layer(np.zeros((1, 3, 4), np.float32))
    assert out.dtype == np.float32
    assert_close(out[0], anp.sinusoidal_positional_encoding(3, 4))
    with pytest.raises(ValueError, match="^max_len must be >= 1"):
        anp.PositionalEncoding(4, max_len=0)


def test_numpy_hard_attention_keeps_dtypes_and_names_the_generator_type(rng):
    """hard_attention: outputs in values' dtype, log_probs in weights' dtype."""
    weights = anp.masked_softmax(rng.normal(size=(2, 3, 5))).astype(np.float32)
    values = rng.normal(size=(2, 5, 4)).astype(np.float32)
    for mode, generator in [("argmax", None), ("sample", np.random.default_rng(0))]:
        outputs, indices, log_probs = anp.hard_attention(
            weights, values, mode, generator
        )
        assert (outputs.dtype, log_probs.dtype) == (np.float32, np.float32), mode
        assert indices.dtype == np.int64
    with pytest.raises(
        TypeError, match=r"^generator must be a numpy\.random\.Generator, got int$"
    ):
        anp.hard_attention(weights, values, "sample", generator=0)


def test_numpy_gru_conversions_return_float64_and_name_the_bad_weight(rng):
    """gru_params_{to,from}_{keras,torch}: the NumPy reference is float64 whatever
    the input's dtype; a wrong shape names the weight."""
    shapes = anp.seq2seq.gru_param_shapes(3, 2)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    kernel, recurrent, bias = anp.gru_params_to_keras(params)
    assert {a.dtype for a in (kernel, recurrent, bias)} == {np.dtype(np.float64)}
    state = anp.gru_params_to_torch(params)
    assert {a.dtype for a in state.values()} == {np.dtype(np.float64)}
    as_f32 = [a.astype(np.float32) for a in (kernel, recurrent, bias)]
    back = anp.gru_params_from_keras(*as_f32)
    assert {a.dtype for a in back.values()} == {np.dtype(np.float64)}
    back = anp.gru_params_from_torch(
        {k: v.astype(np.float32) for k, v in state.items()}
    )
    assert {a.dtype for a in back.values()} == {np.dtype(np.float64)}
    with pytest.raises(ValueError, match="^weight kernel must"):
        anp.gru_params_from_keras(kernel[:, :-1], recurrent, bias)
    with pytest.raises(ValueError, match="^weight recurrent_kernel must"):
        anp.gru_params_from_keras(kernel, recurrent[:, :-1], bias)
    with pytest.raises(ValueError, match="^weight bias must"):
        anp.gru_params_from_keras(kernel, recurrent, bias[:1])
    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        bad = {**state, name: state[name][:-1]}
        with pytest.raises(ValueError, match=f"^weight {name} must"):
            anp.gru_params_from_torch(bad)
    # every gate's input weight must have W_xr's input size, not just any
    mixed = {**params, "W_xz": rng.normal(size=(4, 2))}
    with pytest.raises(ValueError, match=r"^weight W_xz must have shape \(3, 2\)"):
        anp.gru_params_to_keras(mixed)


def test_numpy_gru_and_keras_mask_errors_name_the_argument(rng):
    """The error names what to fix (the sizes, the input, the API)."""
    with pytest.raises(ValueError, match="^input_dim must be >= 1"):
        anp.GRU(0, 2)
    with pytest.raises(ValueError, match="^hidden_dim must be >= 1"):
        anp.GRU(3, 0)
    with pytest.raises(
        ValueError, match=r"^inputs must have 3 axes \(batch, seq_len, input_dim\)"
    ):
        anp.GRU(3, 2)(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"^inputs must have input_dim=3 features"):
        anp.GRU(3, 2)(np.zeros((1, 2, 4)))
    per_head = np.ones((1, 2, 3, 5), bool)
    with pytest.raises(ValueError, match=r"^a per-head mask .* needs num_heads"):
        anp.to_keras_mask(per_head)


def test_numpy_hard_sampling_survives_a_uniform_draw_of_exactly_zero():
    """hard_attention: u is clipped to 1e-300 before -log(-log(u)); a draw of
    0.0 (possible: Generator.random is in [0, 1)) would make every Gumbel
    -inf and always pick key 0, with a divide-by-zero warning."""

    class Zeros(np.random.Generator):
        def random(self, size=None, dtype=np.float64, out=None):
            return np.zeros(size)

    weights = np.array([[[0.2, 0.5, 0.3]]])
    values = np.eye(3)[None]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, indices, log_probs = anp.hard_attention(
            weights, values, "sample", Zeros(np.random.PCG64(0))
        )
    # equal Gumbels everywhere: the sample is the most likely key
    assert indices.tolist() == [[1]]
    assert_close(log_probs, np.log([[0.5]]))
