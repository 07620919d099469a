"""Encoder-decoder building blocks with attention, in NumPy (the reference).

GRU -- the canonical weight layout shared by all three frameworks
-------------------------------------------------------------------
Row vectors, one matrix per gate, gates r (reset), z (update), n (new):

    W_xr, W_xz, W_xn  (d_in, hidden)    input weights
    W_hr, W_hz, W_hn  (hidden, hidden)  recurrent weights
    b_xr, b_xz, b_xn, b_hr, b_hz, b_hn  (hidden,)

    r  = sigmoid(x W_xr + b_xr + h W_hr + b_hr)
    z  = sigmoid(x W_xz + b_xz + h W_hz + b_hz)
    n  = tanh(x W_xn + b_xn + r * (h W_hn + b_hn))     # "reset after"
    h' = (1 - z) * n + z * h

This is PyTorch's nn.GRU and Keras' GRU(reset_after=True) -- but the built-ins
stack the gates differently: torch in the order [r, z, n] along the rows of
weight_ih (3 hidden, d_in), Keras in the order [z, r, h] along the columns of
kernel (d_in, 3 hidden). ``attncourse.numpy.weights`` converts.

Decoders
--------
``Decoder(..., attention=...)`` predicts the next token from the previous one,
a GRU state and the encoder outputs (batch, src_len, hidden):

Attend, then update (the query is the PREVIOUS state s_{t-1}):

* "scaled_dot" -- scaled dot-product scores s_{t-1} . h_j / sqrt(H), keys =
  values = encoder outputs; [embedding; context] -> linear -> GRU (the seed
  notes' "style 1"); the output layer reads [s_t; context], as the readout
  of Bahdanau et al. (2015) reads c_i.
* "bahdanau" -- the same plan with additive scores w_v . tanh(s W_q + h W_k).

Update, then attend (the query is the NEW state s_t):

* "luong_dot" / "luong_general" -- GRU step on the embedding first, then
  attention with s_t (s . h, or s W h), then the attentional hidden
  tanh([context; s] W_c + b_c) -> output projection.

Location-based (Luong et al. 2015's term: the weights address positions and
never read the encoder outputs):

* "location" -- the old PyTorch tutorial's AttnDecoderRNN (the seed notes'
  "style 2"), see ``Decoder``; its output layer reads [s_t; context] like
  the other two attend-then-update decoders (the tutorial read s_t only), so
  the five differ in their attention, not in their readout.

Parameters are flat dicts of arrays, ``params`` (names in ``Decoder``).
"""

import math

import numpy as np

from attncourse import checks

from .masking import sequence_mask
from .pooling import soft_attention
from .scoring import additive_score, bilinear_score, dot_score, scaled_dot_score

__all__ = [
    "GRU",
    "Decoder",
    "Encoder",
    "greedy_decode",
    "gru",
    "gru_step",
    "reverse_padded",
]

GRU_GATES = ("r", "z", "n")


def gru_param_shapes(input_dim, hidden_dim):
    """The canonical GRU layout: name -> shape (see the module docstring)."""
    shapes = {f"W_x{g}": (input_dim, hidden_dim) for g in GRU_GATES}
    shapes.update({f"W_h{g}": (hidden_dim, hidden_dim) for g in GRU_GATES})
    shapes.update({f"b_{s}{g}": (hidden_dim,) for s in "xh" for g in GRU_GATES})
    return shapes


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warnings for large |x|


def gru_step(x, state, params):
    """One GRU step: x (batch, d_in), state (batch, hidden) -> new state."""
    return _gru_update(
        {g: x @ params[f"W_x{g}"] + params[f"b_x{g}"] for g in "rzn"}, state, params
    )


def _gru_update(x_gates, state, params):
    """The GRU equations given the input's gate terms x W_x? + b_x?."""

    def rec(g):
        return state @ params[f"W_h{g}"] + params[f"b_h{g}"]

    r = _sigmoid(x_gates["r"] + rec("r"))
    z = _sigmoid(x_gates["z"] + rec("z"))
    n = np.tanh(x_gates["n"] + r * rec("n"))
    return (1.0 - z) * n + z * state


def gru(inputs, state, params, valid_lens=None):
    """Run a GRU over inputs (batch, n, d_in) from state (batch, hidden).

    state None starts from zeros. With valid_lens (batch,), sequence b stops
    after valid_lens[b] steps: its state is frozen there and its later
    outputs are zeros (as with PyTorch's packed sequences).
    Returns (outputs (batch, n, hidden), last state (batch, hidden)).
    """
    inputs = np.asarray(inputs)
    checks.check_rank("inputs", inputs.shape, 3, "(batch, n, d_in)")
    batch, n, _ = inputs.shape
    hidden = params["W_hr"].shape[0]
    state = np.zeros((batch, hidden), inputs.dtype) if state is None else state
    checks.check_shape("state", np.shape(state), (batch, hidden), "(batch, hidden)")
    # the input terms of every step at once: one matmul per gate, not n
    x_gates = {g: inputs @ params[f"W_x{g}"] + params[f"b_x{g}"] for g in "rzn"}
    outputs = []
    for t in range(n):
        new = _gru_update({g: x[:, t] for g, x in x_gates.items()}, state, params)
        if valid_lens is None:
            state = new
            outputs.append(new)
            continue
        live = (t < np.asarray(valid_lens))[:, None]
        state = np.where(live, new, state)
        outputs.append(np.where(live, new, 0.0))
    return np.stack(outputs, axis=1), state


def _uniform(shape, bound):
    return np.random.uniform(-bound, bound, size=shape)


def _gru_init(prefix, input_dim, hidden_dim):
    """PyTorch's default: U(-1/sqrt(hidden), 1/sqrt(hidden)) for every entry."""
    bound = 1.0 / math.sqrt(hidden_dim)
    return {
        prefix + k: _uniform(s, bound)
        for k, s in gru_param_shapes(input_dim, hidden_dim).items()
    }


def _sub(params, prefix):
    """The entries of a flat dict whose names start with ``prefix + '.'``."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in params.items() if k.startswith(prefix + ".")}


def _linear(x, params, name):
    return x @ params[f"{name}.W"] + params[f"{name}.b"]


class GRU:
    """A GRU layer with the canonical weights ``params`` (see module docstring)."""

    def __init__(self, input_dim, hidden_dim):
        checks.check_positive("input_dim", input_dim)
        checks.check_positive("hidden_dim", hidden_dim)
        self.input_dim, self.hidden_dim = input_dim, hidden_dim
        self.params = _gru_init("", input_dim, hidden_dim)

    def __call__(self, inputs, state=None, valid_lens=None):
        """inputs (batch, n, input_dim) -> (outputs (batch, n, hidden), state)."""
        checks.check_sequence("inputs", np.shape(inputs), "input_dim", self.input_dim)
        return gru(inputs, state, self.params, valid_lens)


def reverse_padded(x, valid_lens=None):
    """x (batch, n, ...) with each sequence's first valid_lens[b] steps in
    reverse order and its padding left in place (all n steps if None).
    Applying it twice gives x back."""
    x = np.asarray(x)
    n = x.shape[1]
    if valid_lens is None:
        return x[:, ::-1]
    t = np.arange(n)[None, :]
    lens = np.asarray(valid_lens)[:, None]
    index = np.where(t < lens, lens - 1 - t, t)  # (batch, n)
    index = index.reshape(index.shape + (1,) * (x.ndim - 2))
    return np.take_along_axis(x, index, axis=1)


class Encoder:
    """Embedding + GRU, one-directional or bidirectional.

    params: embedding (vocab, embed) and gru.* (canonical GRU, hidden_dim
    units). With ``bidirectional=True`` (as Bahdanau et al. 2015) there are
    two GRUs of hidden_dim // 2 units each: gru.* reads the sentence left to
    right and gru_reverse.* right to left; output j is [forward_j;
    backward_j], hidden_dim features that describe word j and both sides of
    it, and the state is [forward state after the last word; backward state
    after the first word]. Splitting hidden_dim between the directions (as
    OpenNMT's brnn does) keeps the decoder's shapes the same either way.
    """

    def __init__(self, vocab_size, embed_dim, hidden_dim, bidirectional=False):
        checks.encoder_dims(vocab_size, embed_dim, hidden_dim, bidirectional)
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
        self.hidden_dim, self.bidirectional = hidden_dim, bidirectional
        self.params = {"embedding": np.random.normal(size=(vocab_size, embed_dim))}
        units = hidden_dim // 2 if bidirectional else hidden_dim
        self.params.update(_gru_init("gru.", embed_dim, units))
        if bidirectional:
            self.params.update(_gru_init("gru_reverse.", embed_dim, units))

    def __call__(self, tokens, valid_lens=None):
        """tokens (batch, src_len) int -> (outputs (batch, src_len, hidden),
        state (batch, hidden)); the state is the last VALID step's if
        valid_lens (batch,) is given, and outputs past it are zeros."""
        tokens = np.asarray(tokens)
        checks.check_tokens("tokens", tokens, "(batch, src_len)", 2)
        if valid_lens is not None:
            valid_lens = np.asarray(valid_lens)
            checks.check_valid_lens(valid_lens.shape, tokens.shape[0], 1)
        embedded = self.params["embedding"][tokens]  # (batch, src_len, E)
        outputs, state = gru(embedded, None, _sub(self.params, "gru"), valid_lens)
        if not self.bidirectional:
            return outputs, state
        backward, back_state = gru(
            reverse_padded(embedded, valid_lens),
            None,
            _sub(self.params, "gru_reverse"),
            valid_lens,
        )
        backward = reverse_padded(backward, valid_lens)  # back in word order
        return (
            np.concatenate([outputs, backward], -1),
            np.concatenate([state, back_state], -1),
        )


def decoder_param_shapes(
    vocab_size, embed_dim, hidden_dim, attention, max_src_len=None
):
    """name -> shape of a Decoder's parameters (linear maps are x @ W + b)."""
    E, H, V = embed_dim, hidden_dim, vocab_size
    shapes = {"embedding": (V, E)}
    shapes.update({f"gru.{k}": s for k, s in gru_param_shapes(E, H).items()})
    luong = attention.startswith("luong")
    d_comb_in, d_comb = (2 * H, H) if luong else (E + H, E)
    shapes.update({"combine.W": (d_comb_in, d_comb), "combine.b": (d_comb,)})
    d_out = H if luong else 2 * H  # predict from [s_t; c_t] unless Luong
    shapes.update({"out.W": (d_out, V), "out.b": (V,)})
    if attention == "bahdanau":
        shapes.update({"attn.W_q": (H, H), "attn.W_k": (H, H), "attn.w_v": (H,)})
    elif attention == "luong_general":
        shapes["attn.W"] = (H, H)
    elif attention == "location":
        shapes.update({"attn.W": (E + H, max_src_len), "attn.b": (max_src_len,)})
    return shapes


class Decoder:
    """A GRU decoder with one of five attention types (module docstring).

    Parameters (``params``; E = embed_dim, H = hidden_dim, V = vocab_size):
    embedding (V, E); gru.* (canonical GRU, input E); out.W, out.b: (2H, V)
    for scaled_dot/bahdanau/location (input [s_t; context]), (H, V) for
    luong (input the attentional hidden);
    combine.W, combine.b: (E + H, E) for scaled_dot/bahdanau/location (input
    [embedding; context]), (2H, H) for luong (input [context; h]); attention:
    bahdanau attn.W_q, attn.W_k (H, H), attn.w_v (H,); luong_general attn.W
    (H, H); location attn.W (E + H, max_src_len), attn.b (max_src_len,).

    location (the old PyTorch tutorial): weights = softmax([embedding; h_prev]
    attn.W + attn.b) over max_src_len fixed positions, context = weights @
    encoder outputs; relu([embedding; context] combine.W + combine.b) -> GRU.
    These weights never look at the encoder outputs' content -- only at the
    current input token and the previous state -- so they can learn "where in
    the sentence" on average, never "which word matches". The tutorial let
    weight fall on positions past the source's end (zero-padded outputs);
    here positions >= src_len and those with src_mask False are masked and the
    weights renormalised over the real tokens.

    The encoder and decoder share hidden_dim (the encoder state starts the
    decoder and the dot scores compare the two).
    """

    def __init__(self, vocab_size, embed_dim, hidden_dim, attention, max_src_len=None):
        checks.check_attention(attention, max_src_len)
        shapes = decoder_param_shapes(
            vocab_size, embed_dim, hidden_dim, attention, max_src_len
        )
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
        self.hidden_dim, self.attention = hidden_dim, attention
        self.max_src_len = max_src_len
        self.params = _decoder_init(shapes)

    def step(self, tokens, state, enc_outputs, src_mask=None):
        """One step: tokens (batch,) int, state (batch, H), enc_outputs
        (batch, src_len, H), src_mask bool (batch, src_len), True = real token.
        Returns (logits (batch, V), new state (batch, H), weights (batch,
        src_len))."""
        tokens, state = np.asarray(tokens), np.asarray(state)
        enc_outputs = np.asarray(enc_outputs)
        src_mask = None if src_mask is None else np.asarray(src_mask)
        checks.decoder_step_inputs(
            tokens,
            state,
            enc_outputs,
            src_mask,
            hidden_dim=self.hidden_dim,
            attention=self.attention,
            max_src_len=self.max_src_len,
        )
        p = self.params
        emb = p["embedding"][tokens]  # (batch, E)
        if self.attention.startswith("luong"):  # update, then attend with s_t
            state = gru_step(emb, state, _sub(p, "gru"))  # (batch, H)
            context, weights = self.attend(state, emb, enc_outputs, src_mask)
            hidden = np.tanh(
                _linear(np.concatenate([context, state], -1), p, "combine")
            )
        else:  # attend with s_{t-1}, then update
            context, weights = self.attend(state, emb, enc_outputs, src_mask)
            x = _linear(np.concatenate([emb, context], -1), p, "combine")
            if self.attention == "location":
                x = np.maximum(x, 0.0)
            state = gru_step(x, state, _sub(p, "gru"))  # (batch, H)
            hidden = np.concatenate([state, context], -1)  # (batch, 2H)
        return _linear(hidden, p, "out"), state, weights

    def __call__(self, targets_in, state, enc_outputs, src_mask=None):
        """Teacher forcing: targets_in (batch, tgt_len) int, the target shifted
        right (starting with BOS). Returns (logits (batch, tgt_len, V),
        weights (batch, tgt_len, src_len))."""
        targets_in = np.asarray(targets_in)
        checks.check_tokens("targets_in", targets_in, "(batch, tgt_len)", 2)
        logits, weights = [], []
        for t in range(targets_in.shape[1]):
            out, state, w = self.step(targets_in[:, t], state, enc_outputs, src_mask)
            logits.append(out)
            weights.append(w)
        return np.stack(logits, 1), np.stack(weights, 1)

    def attend(self, query, emb, enc_outputs, src_mask=None):
        """Context (batch, H) and weights (batch, src_len) for one query (batch, H).

        emb (batch, E) is the embedded input token (the location scores read
        it); src_mask bool (batch, src_len), True = real token.
        """
        scores = self.attention_scores(query[:, None, :], emb, enc_outputs)
        mask = None if src_mask is None else src_mask[:, None, :]  # one query
        context, weights = soft_attention(scores, enc_outputs, mask)
        return context[:, 0], weights[:, 0]

    def attention_scores(self, q, emb, enc):
        """Scores (batch, 1, src_len) of the query q (batch, 1, H) over enc."""
        p, kind = self.params, self.attention
        if kind == "scaled_dot":
            return scaled_dot_score(q, enc)
        if kind == "bahdanau":
            return additive_score(q, enc, p["attn.W_q"], p["attn.W_k"], p["attn.w_v"])
        if kind == "luong_dot":
            return dot_score(q, enc)
        if kind == "luong_general":
            return bilinear_score(q, enc, p["attn.W"])
        # location: a linear map of [embedding; h_prev]; enc gives only its length
        logits = _linear(np.concatenate([emb, q[:, 0]], -1), p, "attn")
        return logits[:, None, : enc.shape[1]]


def _decoder_init(shapes):
    """Embedding N(0, 1); GRU, linear and attention weights U(+-1/sqrt(fan_in))."""
    params = {}
    for name, shape in shapes.items():
        if name == "embedding":
            params[name] = np.random.normal(size=shape)
        elif name.startswith("gru."):
            params[name] = _uniform(shape, 1.0 / math.sqrt(shapes["gru.W_hr"][0]))
        else:
            fan_in = shapes[name[:-1] + "W"][0] if name.endswith(".b") else shape[0]
            params[name] = _uniform(shape, 1.0 / math.sqrt(fan_in))
    return params


def greedy_decode(
    encoder, decoder, src_tokens, src_valid_lens, bos_id, eos_id, max_len
):
    """Translate by always taking the most likely next token.

    src_tokens (batch, src_len) int, src_valid_lens (batch,) or None.
    Decoding stops after max_len steps or once every sequence has emitted
    eos_id; after its EOS a sequence is padded with eos_id and zero weights.
    Returns (tokens (batch, steps), weights (batch, steps, src_len)),
    steps <= max_len; the BOS token is not included, the EOS token is.
    """
    checks.check_positive("max_len", max_len)
    enc_outputs, state = encoder(src_tokens, src_valid_lens)
    batch, src_len = enc_outputs.shape[:2]
    src_mask = (
        None if src_valid_lens is None else sequence_mask(src_valid_lens, src_len)[:, 0]
    )
    tokens = np.full(batch, bos_id, dtype=np.int64)
    done = np.zeros(batch, dtype=bool)
    out_tokens, out_weights = [], []
    for _ in range(max_len):
        logits, state, weights = decoder.step(tokens, state, enc_outputs, src_mask)
        tokens = np.where(done, eos_id, logits.argmax(-1))
        out_tokens.append(tokens)
        out_weights.append(np.where(done[:, None], 0.0, weights))
        done = done | (tokens == eos_id)
        if done.all():
            break
    return np.stack(out_tokens, 1), np.stack(out_weights, 1)
