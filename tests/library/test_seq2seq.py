"""GRU, Encoder, the five Decoder attention types and greedy decoding.

Parity: TF and torch, loaded with the NumPy reference's weights, agree with it.
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse.seed import set_seed

FRAMEWORKS = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}
ATTENTIONS = ["scaled_dot", "location", "bahdanau", "luong_dot", "luong_general"]
V, E, H, B, S, T = 13, 4, 6, 3, 5, 4  # vocab, embed, hidden, batch, src, tgt
LENS = np.array([5, 3, 1])
SRC_MASK = np.arange(S)[None, :] < LENS[:, None]


def trio(cls_name, *args, **kwargs):
    """The NumPy layer and its TF and torch twins holding the same weights."""
    set_seed(0)
    ref = getattr(anp, cls_name)(*args, **kwargs)
    twins = {}
    for name, (module, _) in FRAMEWORKS.items():
        layer = getattr(module, cls_name)(*args, **kwargs)
        module.set_params(layer, anp.get_params(ref))
        twins[name] = layer
    return ref, twins


def encoded(rng):
    enc_outputs = rng.normal(size=(B, S, H)) * np.where(SRC_MASK, 1, 0)[..., None]
    return enc_outputs, rng.normal(size=(B, H))


# --- GRU -----------------------------------------------------------------------


@pytest.mark.parametrize("valid_lens", [None, LENS])
def test_gru_parity(rng, valid_lens):
    ref, twins = trio("GRU", 4, H)
    x, h0 = rng.normal(size=(B, S, 4)), rng.normal(size=(B, H))
    out, state = ref(x, h0, valid_lens)
    assert out.shape == (B, S, H) and state.shape == (B, H)
    for name, layer in twins.items():
        convert = FRAMEWORKS[name][1]
        lens = None if valid_lens is None else convert(valid_lens)
        got_out, got_state = layer(convert(x), convert(h0), lens)
        assert_close(got_out, out, what=name)
        assert_close(got_state, state, what=name)


def test_gru_valid_lens_freeze_the_state(rng):
    gru = anp.GRU(4, H)
    x = rng.normal(size=(B, S, 4))
    out, state = gru(x, None, LENS)
    for b, n in enumerate(LENS):
        alone_out, alone_state = gru(x[b : b + 1, :n])
        assert_close(state[b], alone_state[0])
        assert_close(out[b, :n], alone_out[0])
        assert np.all(out[b, n:] == 0)


def test_gru_step_is_the_documented_equations(rng):
    p = anp.GRU(3, 2).params
    x, h = rng.normal(size=(1, 3)), rng.normal(size=(1, 2))

    def sig(a):
        return 1 / (1 + np.exp(-a))

    r = sig(x @ p["W_xr"] + p["b_xr"] + h @ p["W_hr"] + p["b_hr"])
    z = sig(x @ p["W_xz"] + p["b_xz"] + h @ p["W_hz"] + p["b_hz"])
    n = np.tanh(x @ p["W_xn"] + p["b_xn"] + r * (h @ p["W_hn"] + p["b_hn"]))
    assert_close(anp.gru_step(x, h, p), (1 - z) * n + z * h)


# --- Encoder -------------------------------------------------------------------


@pytest.mark.parametrize("valid_lens", [None, LENS])
def test_encoder_parity(rng, valid_lens):
    ref, twins = trio("Encoder", V, E, H)
    tokens = rng.integers(0, V, size=(B, S))
    out, state = ref(tokens, valid_lens)
    if valid_lens is not None:  # the state is the last VALID step's output
        assert_close(state, out[np.arange(B), valid_lens - 1])
    for name, layer in twins.items():
        convert = FRAMEWORKS[name][1]
        lens = None if valid_lens is None else convert(valid_lens)
        got_out, got_state = layer(convert(tokens), lens)
        assert_close(got_out, out, what=name)
        assert_close(got_state, state, what=name)


@pytest.mark.parametrize("valid_lens", [None, LENS])
def test_bidirectional_encoder_parity(rng, valid_lens):
    """NumPy, TF and torch agree on one set of weights (gru.* + gru_reverse.*)."""
    ref, twins = trio("Encoder", V, E, H, bidirectional=True)
    assert ref.params["gru_reverse.W_hr"].shape == (H // 2, H // 2)
    tokens = rng.integers(0, V, size=(B, S))
    out, state = ref(tokens, valid_lens)
    assert out.shape == (B, S, H) and state.shape == (B, H)
    for name, layer in twins.items():
        convert = FRAMEWORKS[name][1]
        lens = None if valid_lens is None else convert(valid_lens)
        got_out, got_state = layer(convert(tokens), lens)
        assert_close(got_out, out, what=name)
        assert_close(got_state, state, what=name)


def test_bidirectional_encoder_is_two_grus_reading_opposite_ways(rng):
    """Output j = [forward GRU over words 0..j; backward GRU over words j..n-1]
    of each sentence alone (no padding), zeros past the end; the state is
    [forward after the last word; backward after the first word]."""
    enc = anp.Encoder(V, E, H, bidirectional=True)
    fwd = anp.seq2seq._sub(enc.params, "gru")
    bwd = anp.seq2seq._sub(enc.params, "gru_reverse")
    tokens = rng.integers(0, V, size=(B, S))
    out, state = enc(tokens, LENS)
    for b, n in enumerate(LENS):
        x = enc.params["embedding"][tokens[b : b + 1, :n]]  # (1, n, E)
        f_out, f_state = anp.gru(x, None, fwd)
        b_out, b_state = anp.gru(x[:, ::-1], None, bwd)
        assert_close(out[b, :n, : H // 2], f_out[0])
        assert_close(out[b, :n, H // 2 :], b_out[0, ::-1])
        assert_close(state[b], np.concatenate([f_state[0], b_state[0]]))
        assert np.all(out[b, n:] == 0)


def test_bidirectional_encoder_matches_torch_nn_gru(rng):
    """Our encoder's GRUs are nn.GRU(bidirectional=True) on packed sequences."""
    import torch

    set_seed(0)
    enc = atorch.Encoder(V, E, H, bidirectional=True)
    params = atorch.get_params(enc)
    fwd = atorch.gru_params_to_torch(anp.seq2seq._sub(params, "gru"))
    bwd = atorch.gru_params_to_torch(anp.seq2seq._sub(params, "gru_reverse"))
    builtin = torch.nn.GRU(E, H // 2, batch_first=True, bidirectional=True)
    state_dict = {**fwd, **{f"{k}_reverse": v for k, v in bwd.items()}}
    builtin.load_state_dict(
        {k: torch.as_tensor(v, dtype=torch.float32) for k, v in state_dict.items()}
    )
    tokens = torch.as_tensor(rng.integers(0, V, size=(B, S)))
    with torch.no_grad():
        out, state = enc(tokens, torch.as_tensor(LENS))
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            enc.embedding(tokens), LENS, batch_first=True, enforce_sorted=False
        )
        ref_out, ref_state = builtin(packed)
        ref_out, _ = torch.nn.utils.rnn.pad_packed_sequence(
            ref_out, batch_first=True, total_length=S
        )
    assert_close(out, ref_out, what="outputs")
    assert_close(state, torch.cat([ref_state[0], ref_state[1]], -1), what="state")


@pytest.mark.parametrize("module", [anp, atf, atorch], ids=["numpy", "tf", "torch"])
def test_reverse_padded_reverses_only_the_words(module):
    c = {anp: np.asarray, atf: to_tf, atorch: to_torch}[module]
    x = np.arange(B * S).reshape(B, S, 1).astype("float32")
    got = to_np(module.reverse_padded(c(x), c(LENS)))[..., 0]
    np.testing.assert_array_equal(got[0], [4, 3, 2, 1, 0])
    np.testing.assert_array_equal(got[1], [7, 6, 5, 8, 9])  # padding stays put
    np.testing.assert_array_equal(got[2], [10, 11, 12, 13, 14])
    again = to_np(module.reverse_padded(module.reverse_padded(c(x), c(LENS)), c(LENS)))
    np.testing.assert_array_equal(again, x)
    np.testing.assert_array_equal(
        to_np(module.reverse_padded(c(x)))[0, :, 0], x[0, ::-1, 0]
    )


def test_bidirectional_encoder_needs_an_even_hidden_size():
    msg = _same_error(lambda m: m.Encoder(V, E, 5, bidirectional=True))
    assert "hidden_dim must be even, got 5" in msg


# --- Decoder -------------------------------------------------------------------


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_decoder_parity_step_and_teacher_forcing(rng, attention):
    ref, twins = trio("Decoder", V, E, H, attention, max_src_len=S + 2)
    enc_outputs, state = encoded(rng)
    targets = rng.integers(0, V, size=(B, T))
    logits, new_state, w = ref.step(targets[:, 0], state, enc_outputs, SRC_MASK)
    assert logits.shape == (B, V) and new_state.shape == (B, H) and w.shape == (B, S)
    assert np.all(w[~SRC_MASK] == 0)
    assert_close(w.sum(-1), np.ones(B))
    all_logits, all_w = ref(targets, state, enc_outputs, SRC_MASK)
    assert all_logits.shape == (B, T, V) and all_w.shape == (B, T, S)
    assert_close(all_logits[:, 0], logits)
    for name, layer in twins.items():
        c = FRAMEWORKS[name][1]
        got = layer.step(c(targets[:, 0]), c(state), c(enc_outputs), c(SRC_MASK))
        for g, e, what in zip(
            got, (logits, new_state, w), ("logits", "state", "w"), strict=True
        ):
            assert_close(g, e, what=f"{name} step {what}")
        got_logits, got_w = layer(c(targets), c(state), c(enc_outputs), c(SRC_MASK))
        assert_close(got_logits, all_logits, what=f"{name} teacher-forced logits")
        assert_close(got_w, all_w, what=f"{name} teacher-forced weights")


@pytest.mark.parametrize("attention", ["scaled_dot", "bahdanau", "location"])
def test_attend_then_update_decoders_read_the_context_at_the_output(rng, attention):
    """s_t = GRU(combine([e_t; c_t]), s_{t-1}); logits = [s_t; c_t] out.W + out.b."""
    dec = anp.Decoder(V, E, H, attention, max_src_len=S)
    p = dec.params
    enc_outputs, state = encoded(rng)
    tokens = rng.integers(0, V, size=B)
    logits, new_state, w = dec.step(tokens, state, enc_outputs, SRC_MASK)
    context = np.einsum("bs,bsh->bh", w, enc_outputs)
    emb = p["embedding"][tokens]
    x = np.concatenate([emb, context], -1) @ p["combine.W"] + p["combine.b"]
    x = np.maximum(x, 0) if attention == "location" else x
    gru = {k[4:]: v for k, v in p.items() if k.startswith("gru.")}
    assert_close(new_state, anp.gru_step(x, state, gru))
    expected = np.concatenate([new_state, context], -1) @ p["out.W"] + p["out.b"]
    assert_close(logits, expected)


def test_teacher_forcing_is_a_loop_of_steps(rng):
    dec = anp.Decoder(V, E, H, "bahdanau")
    enc_outputs, state = encoded(rng)
    targets = rng.integers(0, V, size=(B, T))
    logits, weights = dec(targets, state, enc_outputs, SRC_MASK)
    for t in range(T):
        step_logits, state, w = dec.step(targets[:, t], state, enc_outputs, SRC_MASK)
        assert_close(logits[:, t], step_logits)
        assert_close(weights[:, t], w)


def test_location_masks_positions_past_the_source(rng):
    dec = anp.Decoder(V, E, H, "location", max_src_len=9)
    enc_outputs, state = encoded(rng)
    _, _, w = dec.step(np.array([1, 2, 3]), state, enc_outputs)  # no src_mask
    assert w.shape == (B, S)
    assert_close(w.sum(-1), np.ones(B))  # renormalised over the S real positions


def test_decoder_gradients_tf_and_torch_agree(rng):
    ref, twins = trio("Decoder", V, E, H, "bahdanau")
    enc_outputs, state = encoded(rng)
    targets = rng.integers(0, V, size=(B, T))
    probe = rng.normal(size=(B, T, V))

    layer = twins["tf"]
    params = layer.params
    with tf.GradientTape() as tape:
        enc = tf.Variable(to_tf(enc_outputs))
        logits, _ = layer(to_tf(targets), to_tf(state), enc, to_tf(SRC_MASK))
        loss = tf.reduce_sum(logits * to_tf(probe))
    grads = tape.gradient(loss, [enc, *params.values()])
    tf_grads = dict(zip(["enc_outputs", *params], grads, strict=True))

    module = twins["torch"]
    enc = to_torch(enc_outputs).requires_grad_()
    logits, _ = module(to_torch(targets), to_torch(state), enc, to_torch(SRC_MASK))
    (logits * to_torch(probe)).sum().backward()
    torch_grads = {"enc_outputs": enc.grad}
    by_storage = {p.data_ptr(): p.grad for p in module.parameters()}
    for name, t in module.params.items():
        # a non-leaf entry is the (in, out) view weight.T of an nn.Linear weight
        grad = by_storage[t.data_ptr()]
        torch_grads[name] = grad if t.is_leaf else grad.T
    assert tf_grads.keys() == torch_grads.keys()
    for name, g in tf_grads.items():
        # Keras returns IndexedSlices for the embedding: densify it
        assert_close(tf.convert_to_tensor(g), torch_grads[name], what=name)
    assert np.all(to_np(torch_grads["enc_outputs"])[~SRC_MASK] == 0)


# --- location attention never looks at the encoder outputs ---------------------


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), attention=st.sampled_from(ATTENTIONS))
def test_only_location_weights_ignore_encoder_content(seed, attention):
    rng = np.random.default_rng(seed)
    set_seed(seed)
    dec = anp.Decoder(V, E, H, attention, max_src_len=S)
    enc_outputs, state = encoded(rng)
    other = rng.normal(size=enc_outputs.shape)  # same shape, new content
    tokens = rng.integers(0, V, size=B)
    w1 = dec.step(tokens, state, enc_outputs, SRC_MASK)[2]
    w2 = dec.step(tokens, state, other, SRC_MASK)[2]
    if attention == "location":
        assert_close(w1, w2)
    else:
        assert np.abs(w1 - w2)[SRC_MASK & (LENS > 1)[:, None]].max() > 1e-6


# --- greedy decoding -------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [False, True])
def test_greedy_decode_parity(bidirectional):
    for attention in ATTENTIONS:
        enc_ref, enc_twins = trio("Encoder", V, E, H, bidirectional=bidirectional)
        dec_ref, dec_twins = trio("Decoder", V, E, H, attention, max_src_len=S)
        dec_ref.params["out.W"] *= 5  # clear winners: no float32 ties in argmax
        for name, (module, _) in FRAMEWORKS.items():
            module.set_params(dec_twins[name], dec_ref.params)
        src = np.random.default_rng(1).integers(0, V, size=(B, S))
        tokens, weights = anp.greedy_decode(enc_ref, dec_ref, src, LENS, 1, 2, 6)
        assert tokens.shape[0] == B and tokens.shape[1] <= 6
        assert weights.shape == (B, tokens.shape[1], S)
        _assert_clear_argmax(dec_ref, enc_ref, src, tokens)
        for name, (module, c) in FRAMEWORKS.items():
            got_tokens, got_w = module.greedy_decode(
                enc_twins[name], dec_twins[name], c(src), c(LENS), 1, 2, 6
            )
            np.testing.assert_array_equal(to_np(got_tokens), tokens, err_msg=name)
            assert_close(got_w, weights, what=f"{name} {attention}")


def _assert_clear_argmax(dec, enc, src, tokens):
    """Precondition of the parity test: top-2 logits differ by > 1e-3."""
    enc_outputs, state = enc(src, LENS)
    targets_in = np.concatenate([np.ones((B, 1), int), tokens[:, :-1]], 1)
    logits, _ = dec(targets_in, state, enc_outputs, SRC_MASK)
    top2 = np.sort(logits, -1)[..., -2:]
    assert np.all(top2[..., 1] - top2[..., 0] > 1e-3)


def test_greedy_decode_stops_at_eos():
    set_seed(0)
    enc, dec = anp.Encoder(V, E, H), anp.Decoder(V, E, H, "luong_dot")
    src = np.zeros((B, S), int)
    tokens, weights = anp.greedy_decode(enc, dec, src, None, 1, 2, 7)
    assert tokens.shape == (B, 7)  # random weights: EOS is unlikely, max_len caps
    dec.params["out.b"][2] = 1e3  # now EOS wins at once
    tokens, weights = anp.greedy_decode(enc, dec, src, None, 1, 2, 7)
    np.testing.assert_array_equal(tokens, np.full((B, 1), 2))
    assert weights.shape == (B, 1, S)


# --- bad input -------------------------------------------------------------------


def _same_error(make_call):
    messages = []
    for module in (anp, atf, atorch):
        with pytest.raises(ValueError) as info:
            make_call(module)
        messages.append(str(info.value))
    assert all(messages[0] in m for m in messages[1:]), messages
    return messages[0]


def test_location_needs_max_src_len():
    msg = _same_error(lambda m: m.Decoder(V, E, H, "location"))
    assert "max_src_len" in msg and "location" in msg


@pytest.mark.parametrize("old,new", [("style1", "scaled_dot"), ("style2", "location")])
def test_seed_notes_names_point_to_the_new_ones(old, new):
    msg = _same_error(lambda m: m.Decoder(V, E, H, old, max_src_len=6))
    assert f"unknown attention {old!r}" in msg and f"is {new!r}" in msg


def test_unknown_attention():
    msg = _same_error(lambda m: m.Decoder(V, E, H, "luong_concat"))
    assert "unknown attention 'luong_concat'" in msg and "bahdanau" in msg


def test_source_longer_than_max_src_len(rng):
    enc_outputs, state = rng.normal(size=(B, 8, H)), rng.normal(size=(B, H))

    def call(m):
        c = {anp: np.asarray, atf: to_tf, atorch: to_torch}[m]
        m.Decoder(V, E, H, "location", max_src_len=6).step(
            c(np.zeros(B, int)), c(state), c(enc_outputs)
        )

    assert "8 source positions, more than the decoder's max_src_len=6" in (
        _same_error(call)
    )


def test_bad_state_shape(rng):
    enc_outputs = rng.normal(size=(B, S, H))

    def call(m):
        c = {anp: np.asarray, atf: to_tf, atorch: to_torch}[m]
        m.Decoder(V, E, H, "scaled_dot").step(
            c(np.zeros(B, int)), c(np.zeros((B, H + 1))), c(enc_outputs)
        )

    assert "state must have shape (batch, hidden_dim) = (3, 6)" in _same_error(call)
