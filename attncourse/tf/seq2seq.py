"""Encoder-decoder building blocks with attention, in TensorFlow / Keras 3.

Same maths, names and weight layout as ``attncourse.numpy.seq2seq`` (read its
docstring for the GRU equations, the canonical GRU layout and the five
decoder attention types). The GRU is written out with tf ops rather than
keras.layers.GRU so every gate is visible; ``attncourse.tf.to_keras_gru``
builds the built-in layer with the same weights, and the tests show they agree.
"""

import math

import keras
import tensorflow as tf

from attncourse import checks
from attncourse.numpy.seq2seq import decoder_param_shapes, gru_param_shapes

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


def gru_step(x, state, params):
    """One GRU step: x (batch, d_in), state (batch, hidden) -> new state."""
    return _gru_update(
        {g: tf.matmul(x, params[f"W_x{g}"]) + params[f"b_x{g}"] for g in "rzn"},
        state,
        params,
    )


def _gru_update(x_gates, state, params):
    """The GRU equations given the input's gate terms x W_x? + b_x?."""

    def rec(g):
        return tf.matmul(state, params[f"W_h{g}"]) + params[f"b_h{g}"]

    r = tf.sigmoid(x_gates["r"] + rec("r"))
    z = tf.sigmoid(x_gates["z"] + rec("z"))
    n = tf.tanh(x_gates["n"] + r * rec("n"))
    return (1.0 - z) * n + z * state


def gru(inputs, state, params, valid_lens=None):
    """Run a GRU over inputs (batch, n, d_in) from state (batch, hidden).

    state None starts from zeros. With valid_lens (batch,), sequence b stops
    after valid_lens[b] steps: its state is frozen there and its later
    outputs are zeros (as with PyTorch's packed sequences).
    Returns (outputs (batch, n, hidden), last state (batch, hidden)).
    """
    inputs = tf.convert_to_tensor(inputs)
    checks.check_rank("inputs", checks.shape_of(inputs), 3, "(batch, n, d_in)")
    batch, n, _ = checks.shape_of(inputs)
    hidden = checks.shape_of(params["W_hr"])[0]
    state = tf.zeros((batch, hidden), inputs.dtype) if state is None else state
    checks.check_shape(
        "state", checks.shape_of(state), (batch, hidden), "(batch, hidden)"
    )
    # the input terms of every step at once: one matmul per gate, not n
    x_gates = {
        g: tf.einsum("bnd,dh->bnh", inputs, params[f"W_x{g}"]) + params[f"b_x{g}"]
        for g in "rzn"
    }
    outputs = []
    for t in range(n):
        new = _gru_update({g: x[:, t] for g, x in x_gates.items()}, state, params)
        if valid_lens is None:
            state = new
            outputs.append(new)
            continue
        live = (t < tf.convert_to_tensor(valid_lens))[:, None]
        state = tf.where(live, new, state)
        outputs.append(tf.where(live, new, tf.zeros_like(new)))
    return tf.stack(outputs, axis=1), state


def _uniform(fan_in):
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default for GRU and Linear."""
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


def _dense(d_in, d_out):
    """A built Dense layer, x @ kernel + bias, kernel (d_in, d_out)."""
    layer = keras.layers.Dense(
        d_out, kernel_initializer=_uniform(d_in), bias_initializer=_uniform(d_in)
    )
    layer.build((None, d_in))
    return layer


def _dense_params(name, layer):
    """A Dense layer's kernel (in, out) and bias as name.W, name.b."""
    return {f"{name}.W": layer.kernel, f"{name}.b": layer.bias}


class GRU(keras.layers.Layer):
    """A GRU layer with the canonical weights ``params`` (see module docstring)."""

    def __init__(self, input_dim, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        checks.check_positive("input_dim", input_dim)
        checks.check_positive("hidden_dim", hidden_dim)
        self.input_dim, self.hidden_dim = input_dim, hidden_dim
        self._params = {
            name: self.add_weight(
                name=name, shape=shape, initializer=_uniform(hidden_dim)
            )
            for name, shape in gru_param_shapes(input_dim, hidden_dim).items()
        }
        self.built = True

    @property
    def params(self) -> dict:
        """name -> variable, in the canonical GRU layout."""
        return dict(self._params)

    def call(self, inputs, state=None, valid_lens=None):
        """inputs (batch, n, input_dim) -> (outputs (batch, n, hidden), state)."""
        inputs = tf.convert_to_tensor(inputs)
        checks.check_sequence(
            "inputs", checks.shape_of(inputs), "input_dim", self.input_dim
        )
        return gru(inputs, state, self.params, valid_lens)

    def get_config(self):
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "hidden_dim": self.hidden_dim,
        }


def _embedding(vocab_size, embed_dim):
    layer = keras.layers.Embedding(
        vocab_size,
        embed_dim,
        embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
    )
    layer.build((None,))
    return layer


def reverse_padded(x, valid_lens=None):
    """x (batch, n, ...) with each sequence's first valid_lens[b] steps in
    reverse order and its padding left in place (all n steps if None).
    Applying it twice gives x back."""
    x = tf.convert_to_tensor(x)
    if valid_lens is None:
        return tf.reverse(x, [1])
    return tf.reverse_sequence(
        x, tf.cast(valid_lens, tf.int64), seq_axis=1, batch_axis=0
    )


class Encoder(keras.layers.Layer):
    """Embedding + GRU, one-directional or bidirectional.

    Canonical weights: embedding (vocab, embed), gru.* and, if bidirectional,
    gru_reverse.* (each direction hidden_dim // 2 units; outputs and state
    are [forward; backward]). See ``attncourse.numpy.Encoder``.
    """

    def __init__(
        self, vocab_size, embed_dim, hidden_dim, bidirectional=False, **kwargs
    ):
        super().__init__(**kwargs)
        checks.encoder_dims(vocab_size, embed_dim, hidden_dim, bidirectional)
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
        self.hidden_dim, self.bidirectional = hidden_dim, bidirectional
        self.embedding = _embedding(vocab_size, embed_dim)
        units = hidden_dim // 2 if bidirectional else hidden_dim
        self.gru = GRU(embed_dim, units)
        self.gru_reverse = GRU(embed_dim, units) if bidirectional else None
        self.built = True

    @property
    def params(self) -> dict:
        """name -> variable: embedding (vocab, embed), gru.*, gru_reverse.*."""
        params = {
            "embedding": self.embedding.embeddings,
            **{f"gru.{k}": v for k, v in self.gru.params.items()},
        }
        if self.bidirectional:
            params.update(
                {f"gru_reverse.{k}": v for k, v in self.gru_reverse.params.items()}
            )
        return params

    def _checked_inputs(self, tokens, valid_lens):
        """The inputs as tensors, their shapes checked (one call, so that
        the forward pass reads like the maths)."""
        tokens = tf.convert_to_tensor(tokens)
        checks.check_tokens("tokens", tokens, "(batch, src_len)", 2)
        if valid_lens is not None:
            valid_lens = tf.convert_to_tensor(valid_lens)
            checks.check_valid_lens(
                checks.shape_of(valid_lens), checks.shape_of(tokens)[0], 1
            )
        return tokens, valid_lens

    def call(self, tokens, valid_lens=None):
        """tokens (batch, src_len) int -> (outputs (batch, src_len, hidden),
        state (batch, hidden)); the state is the last VALID step's if
        valid_lens (batch,) is given, and outputs past it are zeros."""
        tokens, valid_lens = self._checked_inputs(tokens, valid_lens)
        embedded = self.embedding(tokens)  # (batch, src_len, E)
        outputs, state = self.gru(embedded, None, valid_lens)
        if not self.bidirectional:
            return outputs, state
        backward, back_state = self.gru_reverse(
            reverse_padded(embedded, valid_lens), None, valid_lens
        )
        backward = reverse_padded(backward, valid_lens)  # back in word order
        return tf.concat([outputs, backward], -1), tf.concat([state, back_state], -1)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "hidden_dim": self.hidden_dim,
            "bidirectional": self.bidirectional,
        }


class Decoder(keras.layers.Layer):
    """A GRU decoder with one of five attention types.

    See ``attncourse.numpy.seq2seq.Decoder`` for the parameters' names and
    shapes and for "location", the old PyTorch tutorial's decoder, whose weights
    never look at the encoder outputs' content (only at the input token and
    the previous state); here its padded positions are masked and the weights
    renormalised over the real tokens.
    """

    def __init__(
        self, vocab_size, embed_dim, hidden_dim, attention, max_src_len=None, **kwargs
    ):
        super().__init__(**kwargs)
        checks.check_attention(attention, max_src_len)
        shapes = decoder_param_shapes(
            vocab_size, embed_dim, hidden_dim, attention, max_src_len
        )
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
        self.hidden_dim, self.attention = hidden_dim, attention
        self.max_src_len = max_src_len
        self.embedding = _embedding(vocab_size, embed_dim)
        self.gru = GRU(embed_dim, hidden_dim)
        self.combine = _dense(*shapes["combine.W"])
        self.out = _dense(*shapes["out.W"])
        if attention == "location":
            self.attn = _dense(*shapes["attn.W"])
        else:
            self.attn = {
                k[5:]: self.add_weight(name=k[5:], shape=s, initializer=_uniform(s[0]))
                for k, s in shapes.items()
                if k.startswith("attn.")
            }
        self.built = True

    @property
    def params(self) -> dict:
        """name -> variable, the names and shapes of decoder_param_shapes."""
        params = {
            "embedding": self.embedding.embeddings,
            **{f"gru.{k}": v for k, v in self.gru.params.items()},
            **_dense_params("combine", self.combine),
            **_dense_params("out", self.out),
        }
        if self.attention == "location":
            params.update(_dense_params("attn", self.attn))
        else:
            params.update({f"attn.{k}": v for k, v in self.attn.items()})
        return params

    def _checked_step_inputs(self, tokens, state, enc_outputs, src_mask):
        """step()'s inputs as tensors, their shapes checked (one call, so that
        step reads like the maths)."""
        tokens, state, enc_outputs = (
            tf.convert_to_tensor(t) for t in (tokens, state, enc_outputs)
        )
        src_mask = None if src_mask is None else tf.convert_to_tensor(src_mask)
        checks.decoder_step_inputs(
            tokens,
            state,
            enc_outputs,
            src_mask,
            hidden_dim=self.hidden_dim,
            attention=self.attention,
            max_src_len=self.max_src_len,
        )
        return tokens, state, enc_outputs, src_mask

    def step(self, tokens, state, enc_outputs, src_mask=None):
        """One step: tokens (batch,) int, state (batch, H), enc_outputs
        (batch, src_len, H), src_mask bool (batch, src_len), True = real token.
        Returns (logits (batch, V), new state (batch, H), weights (batch,
        src_len))."""
        tokens, state, enc_outputs, src_mask = self._checked_step_inputs(
            tokens, state, enc_outputs, src_mask
        )
        emb = self.embedding(tokens)  # (batch, E)
        if self.attention.startswith("luong"):  # update, then attend with s_t
            state = gru_step(emb, state, self.gru.params)  # (batch, H)
            context, weights = self.attend(state, emb, enc_outputs, src_mask)
            hidden = tf.tanh(self.combine(tf.concat([context, state], -1)))
        else:  # attend with s_{t-1}, then update
            context, weights = self.attend(state, emb, enc_outputs, src_mask)
            x = self.combine(tf.concat([emb, context], -1))
            if self.attention == "location":
                x = tf.nn.relu(x)
            state = gru_step(x, state, self.gru.params)  # (batch, H)
            hidden = tf.concat([state, context], -1)  # (batch, 2H)
        return self.out(hidden), state, weights

    def call(self, targets_in, state, enc_outputs, src_mask=None):
        """Teacher forcing: targets_in (batch, tgt_len) int, the target shifted
        right (starting with BOS). Returns (logits (batch, tgt_len, V),
        weights (batch, tgt_len, src_len))."""
        targets_in = tf.convert_to_tensor(targets_in)
        checks.check_tokens("targets_in", targets_in, "(batch, tgt_len)", 2)
        logits, weights = [], []
        for t in range(targets_in.shape[1]):
            out, state, w = self.step(targets_in[:, t], state, enc_outputs, src_mask)
            logits.append(out)
            weights.append(w)
        return tf.stack(logits, 1), tf.stack(weights, 1)

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
        kind, a = self.attention, self.attn
        if kind == "scaled_dot":
            return scaled_dot_score(q, enc)
        if kind == "bahdanau":
            return additive_score(q, enc, a["W_q"], a["W_k"], a["w_v"])
        if kind == "luong_dot":
            return dot_score(q, enc)
        if kind == "luong_general":
            return bilinear_score(q, enc, a["W"])
        # location: a linear map of [embedding; h_prev]; enc gives only its length
        logits = self.attn(tf.concat([emb, q[:, 0]], -1))
        return logits[:, None, : enc.shape[1]]

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "hidden_dim": self.hidden_dim,
            "attention": self.attention,
            "max_src_len": self.max_src_len,
        }


def greedy_decode(
    encoder, decoder, src_tokens, src_valid_lens, bos_id, eos_id, max_len
):
    """Translate by always taking the most likely next token.

    src_tokens (batch, src_len) int, src_valid_lens (batch,) or None.
    Decoding stops after max_len steps or once every sequence has emitted
    eos_id; after its EOS a sequence is padded with eos_id and zero weights.
    Returns (tokens (batch, steps) int64, weights (batch, steps, src_len)),
    steps <= max_len; the BOS token is not included, the EOS token is.
    """
    checks.check_positive("max_len", max_len)
    enc_outputs, state = encoder(src_tokens, src_valid_lens)
    batch, src_len = checks.shape_of(enc_outputs)[:2]
    src_mask = (
        None if src_valid_lens is None else sequence_mask(src_valid_lens, src_len)[:, 0]
    )
    tokens = tf.fill((batch,), tf.constant(bos_id, tf.int64))
    done = tf.zeros((batch,), tf.bool)
    out_tokens, out_weights = [], []
    for _ in range(max_len):
        logits, state, weights = decoder.step(tokens, state, enc_outputs, src_mask)
        tokens = tf.where(done, tf.constant(eos_id, tf.int64), tf.argmax(logits, -1))
        out_tokens.append(tokens)
        out_weights.append(tf.where(done[:, None], tf.zeros_like(weights), weights))
        done = done | (tokens == eos_id)
        if bool(tf.reduce_all(done)):
            break
    return tf.stack(out_tokens, 1), tf.stack(out_weights, 1)
