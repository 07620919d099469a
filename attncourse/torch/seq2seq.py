"""Encoder-decoder building blocks with attention, in PyTorch.

Same maths, names and weight layout as ``attncourse.numpy.seq2seq`` (read its
docstring for the GRU equations, the canonical GRU layout and the five
decoder attention types). The GRU is written out with tensor ops rather than
nn.GRU so every gate is visible; ``attncourse.torch.to_torch_gru`` builds the
built-in module with the same weights, and the tests show they agree.
"""

import math

import torch
from torch import nn

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
        {g: x @ params[f"W_x{g}"] + params[f"b_x{g}"] for g in "rzn"}, state, params
    )


def _gru_update(x_gates, state, params):
    """The GRU equations given the input's gate terms x W_x? + b_x?."""

    def rec(g):
        return state @ params[f"W_h{g}"] + params[f"b_h{g}"]

    r = torch.sigmoid(x_gates["r"] + rec("r"))
    z = torch.sigmoid(x_gates["z"] + rec("z"))
    n = torch.tanh(x_gates["n"] + r * rec("n"))
    return (1.0 - z) * n + z * state


def gru(inputs, state, params, valid_lens=None):
    """Run a GRU over inputs (batch, n, d_in) from state (batch, hidden).

    state None starts from zeros. With valid_lens (batch,), sequence b stops
    after valid_lens[b] steps: its state is frozen there and its later
    outputs are zeros (as with PyTorch's packed sequences).
    Returns (outputs (batch, n, hidden), last state (batch, hidden)).
    """
    inputs = torch.as_tensor(inputs)
    checks.check_rank("inputs", checks.shape_of(inputs), 3, "(batch, n, d_in)")
    batch, n, _ = inputs.shape
    hidden = params["W_hr"].shape[0]
    if state is None:
        state = inputs.new_zeros(batch, hidden)
    checks.check_shape(
        "state", checks.shape_of(state), (batch, hidden), "(batch, hidden)"
    )
    if valid_lens is not None:
        valid_lens = torch.as_tensor(valid_lens, device=inputs.device)
    # the input terms of every step at once: one matmul per gate, not n
    x_gates = {g: inputs @ params[f"W_x{g}"] + params[f"b_x{g}"] for g in "rzn"}
    outputs = []
    for t in range(n):
        new = _gru_update({g: x[:, t] for g, x in x_gates.items()}, state, params)
        if valid_lens is None:
            state = new
            outputs.append(new)
            continue
        live = (t < valid_lens)[:, None]
        state = torch.where(live, new, state)
        outputs.append(torch.where(live, new, torch.zeros_like(new)))
    return torch.stack(outputs, dim=1), state


def _uniform_param(shape, bound):
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


def _linear_params(name, layer):
    """An nn.Linear as name.W (in, out) and name.b: torch stores weight as
    (out, in), so name.W is the view weight.T (writing it writes weight)."""
    return {f"{name}.W": layer.weight.T, f"{name}.b": layer.bias}


class GRU(nn.Module):
    """A GRU layer with the canonical weights ``params`` (see module docstring).

    Initialised like nn.GRU: every entry U(-1/sqrt(hidden), 1/sqrt(hidden)).
    """

    def __init__(self, input_dim, hidden_dim):
        super().__init__()
        checks.check_positive("input_dim", input_dim)
        checks.check_positive("hidden_dim", hidden_dim)
        self.input_dim, self.hidden_dim = input_dim, hidden_dim
        bound = 1.0 / math.sqrt(hidden_dim)
        self.params = nn.ParameterDict(
            {
                k: _uniform_param(s, bound)
                for k, s in gru_param_shapes(input_dim, hidden_dim).items()
            }
        )

    def forward(self, inputs, state=None, valid_lens=None):
        """inputs (batch, n, input_dim) -> (outputs (batch, n, hidden), state)."""
        inputs = torch.as_tensor(inputs)
        checks.check_sequence(
            "inputs", checks.shape_of(inputs), "input_dim", self.input_dim
        )
        return gru(inputs, state, self.params, valid_lens)


def _embedding(vocab_size, embed_dim):
    return nn.Embedding(vocab_size, embed_dim)  # N(0, 1), as in NumPy and Keras


def reverse_padded(x, valid_lens=None):
    """x (batch, n, ...) with each sequence's first valid_lens[b] steps in
    reverse order and its padding left in place (all n steps if None).
    Applying it twice gives x back."""
    x = torch.as_tensor(x)
    if valid_lens is None:
        return torch.flip(x, [1])
    t = torch.arange(x.shape[1], device=x.device)[None, :]
    lens = torch.as_tensor(valid_lens, device=x.device)[:, None]
    index = torch.where(t < lens, lens - 1 - t, t)  # (batch, n)
    return x[torch.arange(x.shape[0], device=x.device)[:, None], index]


class Encoder(nn.Module):
    """Embedding + GRU, one-directional or bidirectional.

    Canonical weights: embedding (vocab, embed), gru.* and, if bidirectional,
    gru_reverse.* (each direction hidden_dim // 2 units; outputs and state
    are [forward; backward]). See ``attncourse.numpy.Encoder``.
    """

    def __init__(self, vocab_size, embed_dim, hidden_dim, bidirectional=False):
        super().__init__()
        checks.encoder_dims(vocab_size, embed_dim, hidden_dim, bidirectional)
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
        self.hidden_dim, self.bidirectional = hidden_dim, bidirectional
        self.embedding = _embedding(vocab_size, embed_dim)
        units = hidden_dim // 2 if bidirectional else hidden_dim
        self.gru = GRU(embed_dim, units)
        self.gru_reverse = GRU(embed_dim, units) if bidirectional else None

    @property
    def params(self) -> dict:
        """name -> tensor: embedding (vocab, embed), gru.*, gru_reverse.*."""
        params = {
            "embedding": self.embedding.weight,
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
        tokens = torch.as_tensor(tokens, device=self.embedding.weight.device)
        checks.check_tokens("tokens", tokens, "(batch, src_len)", 2)
        if valid_lens is not None:
            valid_lens = torch.as_tensor(valid_lens, device=tokens.device)
            checks.check_valid_lens(checks.shape_of(valid_lens), tokens.shape[0], 1)
        return tokens, valid_lens

    def forward(self, tokens, valid_lens=None):
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
        return torch.cat([outputs, backward], -1), torch.cat([state, back_state], -1)


class Decoder(nn.Module):
    """A GRU decoder with one of five attention types.

    See ``attncourse.numpy.seq2seq.Decoder`` for the parameters' names and
    shapes and for "location", the old PyTorch tutorial's decoder, whose weights
    never look at the encoder outputs' content (only at the input token and
    the previous state); here its padded positions are masked and the weights
    renormalised over the real tokens.
    """

    def __init__(self, vocab_size, embed_dim, hidden_dim, attention, max_src_len=None):
        super().__init__()
        checks.check_attention(attention, max_src_len)
        shapes = decoder_param_shapes(
            vocab_size, embed_dim, hidden_dim, attention, max_src_len
        )
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
        self.hidden_dim, self.attention = hidden_dim, attention
        self.max_src_len = max_src_len
        self.embedding = _embedding(vocab_size, embed_dim)
        self.gru = GRU(embed_dim, hidden_dim)
        self.combine = nn.Linear(*shapes["combine.W"])
        self.out = nn.Linear(*shapes["out.W"])
        if attention == "location":
            self.attn = nn.Linear(*shapes["attn.W"])
        else:
            self.attn = nn.ParameterDict(
                {
                    k[5:]: _uniform_param(s, 1.0 / math.sqrt(s[0]))
                    for k, s in shapes.items()
                    if k.startswith("attn.")
                }
            )

    @property
    def params(self) -> dict:
        """name -> tensor in (in, out) layout, as in decoder_param_shapes."""
        params = {
            "embedding": self.embedding.weight,
            **{f"gru.{k}": v for k, v in self.gru.params.items()},
            **_linear_params("combine", self.combine),
            **_linear_params("out", self.out),
        }
        if self.attention == "location":
            params.update(_linear_params("attn", self.attn))
        else:
            params.update({f"attn.{k}": v for k, v in self.attn.items()})
        return params

    def _checked_step_inputs(self, tokens, state, enc_outputs, src_mask):
        """step()'s inputs as tensors on the parameters' device, their shapes
        checked (one call, so that step reads like the maths)."""
        device = self.embedding.weight.device  # inputs follow the parameters
        tokens, state, enc_outputs = (
            torch.as_tensor(t, device=device) for t in (tokens, state, enc_outputs)
        )
        if src_mask is not None:
            src_mask = torch.as_tensor(src_mask, device=enc_outputs.device)
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
            hidden = torch.tanh(self.combine(torch.cat([context, state], -1)))
        else:  # attend with s_{t-1}, then update
            context, weights = self.attend(state, emb, enc_outputs, src_mask)
            x = self.combine(torch.cat([emb, context], -1))
            if self.attention == "location":
                x = torch.relu(x)
            state = gru_step(x, state, self.gru.params)  # (batch, H)
            hidden = torch.cat([state, context], -1)  # (batch, 2H)
        return self.out(hidden), state, weights

    def forward(self, targets_in, state, enc_outputs, src_mask=None):
        """Teacher forcing: targets_in (batch, tgt_len) int, the target shifted
        right (starting with BOS). Returns (logits (batch, tgt_len, V),
        weights (batch, tgt_len, src_len))."""
        targets_in = torch.as_tensor(targets_in, device=self.embedding.weight.device)
        checks.check_tokens("targets_in", targets_in, "(batch, tgt_len)", 2)
        logits, weights = [], []
        for t in range(targets_in.shape[1]):
            out, state, w = self.step(targets_in[:, t], state, enc_outputs, src_mask)
            logits.append(out)
            weights.append(w)
        return torch.stack(logits, 1), torch.stack(weights, 1)

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
        logits = self.attn(torch.cat([emb, q[:, 0]], -1))
        return logits[:, None, : enc.shape[1]]


@torch.no_grad()
def greedy_decode(
    encoder, decoder, src_tokens, src_valid_lens, bos_id, eos_id, max_len
):
    """Translate by always taking the most likely next token (no autograd).

    src_tokens (batch, src_len) int, src_valid_lens (batch,) or None.
    Decoding stops after max_len steps or once every sequence has emitted
    eos_id; after its EOS a sequence is padded with eos_id and zero weights.
    Returns (tokens (batch, steps) int64, weights (batch, steps, src_len)),
    steps <= max_len; the BOS token is not included, the EOS token is.
    """
    checks.check_positive("max_len", max_len)
    enc_outputs, state = encoder(src_tokens, src_valid_lens)
    batch, src_len = enc_outputs.shape[:2]
    device = enc_outputs.device
    src_mask = (
        None
        if src_valid_lens is None
        else sequence_mask(torch.as_tensor(src_valid_lens, device=device), src_len)[
            :, 0
        ]
    )
    tokens = torch.full((batch,), bos_id, dtype=torch.int64, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    out_tokens, out_weights = [], []
    for _ in range(max_len):
        logits, state, weights = decoder.step(tokens, state, enc_outputs, src_mask)
        tokens = torch.where(done, eos_id, logits.argmax(-1))
        out_tokens.append(tokens)
        out_weights.append(torch.where(done[:, None], 0.0, weights))
        done = done | (tokens == eos_id)
        if bool(done.all()):
            break
    return torch.stack(out_tokens, 1), torch.stack(out_weights, 1)
