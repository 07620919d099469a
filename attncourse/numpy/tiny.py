"""A tiny decoder-only Transformer in NumPy (the float64 reference forward).

tokens (batch, n) int -> logits (batch, n, vocab_size); position i predicts
token i + 1 and sees only tokens 0..i (a causal mask). Attention-only by
default, and without LayerNorm by default, as the two-layer models of
Elhage et al. (2021):

    x = E[tokens] (+ P[:n])                          # (batch, n, d_model)
    for each layer:  x = x + MHA(x)                  # (+ FFN(x) if mlp)
    logits = x @ W_U + b_U                           # (batch, n, vocab_size)

``layer_norm=True`` puts a LayerNorm before each sublayer and before W_U
(pre-LN, as GPT-2). In untuned trial runs with the chapter's setup (300 Adam
steps at lr 0.01, three seeds) the model without it formed induction heads,
the pre-LN one did not (nor in 1200 steps, one seed): a fact about this small
setup, not about LayerNorm (full Transformers form them; Olsson et al., 2022).

Positions: "learned" (a table P of max_len rows; longer inputs raise a
ValueError), "sinusoidal" (the fixed table added to the embeddings), "rope"
(queries and keys rotated per head, ``positional.apply_rope``), "alibi" (a
linear distance penalty added to each head's scores,
``positional.alibi_bias``) or "none" (only the causal mask tells order).
All but "learned" accept any length.

Attention: ``attention="softmax"`` (the default), ``"linear"`` (causal
linear attention with elu + 1 features, ``sparse.linear_attention``) or
``"window"`` with ``window=w`` (each query sees its last w tokens, itself
included, ``sparse.sliding_window_attention``). The parameters are the same
for all three, so one set of weights runs in each; ALiBi needs the softmax
scores.

The parameters are one flat dict (``tiny_param_shapes``); the TF and torch
models hold the same names, so ``get_params`` / ``set_params`` copy a model
between the frameworks. The head scores find previous-token and induction
heads in attention maps (Olsson et al., 2022).
"""

import math

import numpy as np

from attncourse import checks

from . import positional
from .masking import causal_mask, masked_softmax
from .multihead import merge_heads, split_heads
from .sparse import banded_attention, elu_feature_map, linear_attention_on_features

__all__ = [
    "TinyTransformer",
    "induction_score",
    "previous_token_score",
    "tiny_param_shapes",
    "tiny_transformer",
]

ATTN = ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o")


def tiny_param_shapes(
    vocab_size,
    d_model,
    num_layers,
    max_len,
    *,
    mlp=False,
    positions="learned",
    layer_norm=False,
    d_ff=None,
):
    """name -> shape of every parameter, in the order all three frameworks
    create them: embed (vocab, d_model), pos (max_len, d_model) for learned
    positions, per layer ``layer{l}.attn.*`` (the multi_head_attention
    layout) and with mlp ``layer{l}.ffn.W_1 (d_model, d_ff) b_1 W_2 (d_ff,
    d_model) b_2`` (d_ff = 4 d_model by default); unembed.W (d_model, vocab),
    unembed.b (vocab,). With layer_norm, ``layer{l}.norm1.gamma/beta``
    (and norm2 with mlp) before each sublayer and norm_f before unembed."""
    d_ff = 4 * d_model if d_ff is None else d_ff
    shapes = {"embed": (vocab_size, d_model)}
    if positions == "learned":
        shapes["pos"] = (max_len, d_model)
    norm = {"gamma": (d_model,), "beta": (d_model,)} if layer_norm else {}
    for layer in range(num_layers):
        pre = f"layer{layer}."
        shapes.update({f"{pre}norm1.{k}": s for k, s in norm.items()})
        for name in ATTN:
            shape = (d_model, d_model) if name[0] == "W" else (d_model,)
            shapes[f"{pre}attn.{name}"] = shape
        if mlp:
            shapes.update({f"{pre}norm2.{k}": s for k, s in norm.items()})
            shapes.update(
                {
                    f"{pre}ffn.W_1": (d_model, d_ff),
                    f"{pre}ffn.b_1": (d_ff,),
                    f"{pre}ffn.W_2": (d_ff, d_model),
                    f"{pre}ffn.b_2": (d_model,),
                }
            )
    shapes.update({f"norm_f.{k}": s for k, s in norm.items()})
    shapes.update({"unembed.W": (d_model, vocab_size), "unembed.b": (vocab_size,)})
    return shapes


def _initial_value(name, shape, rng):
    """embed/pos N(0, 1/d_model)-ish, Glorot matrices, gamma 1, zero biases."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "gamma":
        return np.ones(shape)
    if leaf.startswith(("b", "beta")):
        return np.zeros(shape)
    if name in ("embed", "pos"):
        return rng.normal(0.0, 1.0 / math.sqrt(shape[1]), size=shape)
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return rng.uniform(-limit, limit, size=shape)


def _layer_norm(x, p, prefix, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p[prefix + "gamma"] + p[prefix + "beta"]


def attention_sublayer(x, p, pre, num_heads, positions, head_mask, attention, window):
    """Causal multi-head self-attention of one layer; returns (out, weights):
    softmax weights (batch, heads, n, n), the band (batch, heads, n, window)
    for "window", None for "linear" (it forms no weights)."""
    n = x.shape[1]
    q, k, v = (
        split_heads(x @ p[f"{pre}W_{c}"] + p[f"{pre}b_{c}"], num_heads) for c in "qkv"
    )  # each (batch, heads, n, d_head)
    if positions == "rope":
        q, k = positional.apply_rope(q), positional.apply_rope(k)
    if attention == "window":  # the band of the last `window` keys
        scale = 1.0 / math.sqrt(q.shape[-1])
        heads, weights = banded_attention(q, k, v, window, True, scale)
    elif attention == "linear":  # elu + 1 features, a running state
        heads = linear_attention_on_features(
            elu_feature_map(q), elu_feature_map(k), v, True, 1e-6
        )
        weights = None
    else:  # softmax over the (n, n) causal scores
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
        if positions == "alibi":
            scores = scores + positional.alibi_bias(num_heads, n)  # (heads, n, n)
        weights = masked_softmax(scores, causal_mask(n))  # (batch, heads, n, n)
        heads = weights @ v  # (batch, heads, n, d_head)
    if head_mask is not None:
        heads = heads * head_mask[:, None, None]
    return merge_heads(heads) @ p[f"{pre}W_o"] + p[f"{pre}b_o"], weights


def tiny_transformer(
    tokens,
    params,
    num_heads,
    num_layers,
    *,
    positions="learned",
    mlp=False,
    layer_norm=False,
    head_mask=None,
    attention="softmax",
    window=None,
):
    """The forward pass with the parameters ``params`` (tiny_param_shapes).

    tokens (batch, n) int; head_mask: optional (num_layers, num_heads)
    factors on each head's output (0 = ablate that head); attention
    "softmax", "linear" or "window" (with window=w), see TinyTransformer.
    Returns (logits (batch, n, vocab_size), [weights per layer]): (batch,
    heads, n, n) for softmax, the band (batch, heads, n, w) for "window"
    (sparse.sliding_window_attention's layout), None for "linear".
    """
    checks.tiny_attention(attention, window, positions)
    p = params
    x = p["embed"][tokens]  # (batch, n, d_model)
    n, d_model = tokens.shape[1], x.shape[-1]
    if positions == "learned":
        x = x + p["pos"][:n]
    elif positions == "sinusoidal":
        x = x + positional.sinusoidal_positional_encoding(n, d_model)

    def norm(x, prefix):  # pre-LN, or the identity (the default)
        return _layer_norm(x, p, prefix) if layer_norm else x

    all_weights = []
    for layer in range(num_layers):
        pre = f"layer{layer}."
        mask = None if head_mask is None else head_mask[layer]
        out, weights = attention_sublayer(
            norm(x, pre + "norm1."),
            p,
            pre + "attn.",
            num_heads,
            positions,
            mask,
            attention,
            window,
        )
        x = x + out  # the residual stream
        all_weights.append(weights)
        if mlp:
            h = norm(x, pre + "norm2.") @ p[pre + "ffn.W_1"]
            h = np.maximum(h + p[pre + "ffn.b_1"], 0.0)
            x = x + h @ p[pre + "ffn.W_2"] + p[pre + "ffn.b_2"]
    logits = norm(x, "norm_f.") @ p["unembed.W"] + p["unembed.b"]
    return logits, all_weights


class TinyTransformer:
    """A decoder-only Transformer holding its parameters (float64).

    ``layer.params`` is the flat dict of tiny_param_shapes, drawn from
    ``seed`` (a NumPy generator): embeddings N(0, 1/d_model), Glorot
    matrices, zero biases, LayerNorm gains 1 (with layer_norm). The TF and
    torch models have the same names and can start from these values
    (``set_params``). ``attention`` / ``window``: see the module docstring,
    e.g. ``TinyTransformer(..., attention="window", window=4)``.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        num_heads,
        num_layers,
        max_len,
        *,
        mlp=False,
        positions="learned",
        layer_norm=False,
        d_ff=None,
        attention="softmax",
        window=None,
        seed=None,
    ):
        checks.tiny_sizes(
            vocab_size, d_model, num_heads, num_layers, max_len, positions
        )
        self.vocab_size, self.d_model = int(vocab_size), int(d_model)
        self.num_heads, self.num_layers = int(num_heads), int(num_layers)
        self.max_len, self.mlp, self.positions = int(max_len), mlp, positions
        self.layer_norm = bool(layer_norm)
        checks.tiny_attention(attention, window, positions)
        self.attention = attention
        self.window = None if window is None else int(window)
        shapes = tiny_param_shapes(
            vocab_size,
            d_model,
            num_layers,
            max_len,
            mlp=mlp,
            positions=positions,
            layer_norm=layer_norm,
            d_ff=d_ff,
        )
        rng = np.random.default_rng(seed)
        self.params = {k: _initial_value(k, s, rng) for k, s in shapes.items()}

    def __call__(self, tokens, return_weights=False, head_mask=None):
        """logits (batch, n, vocab_size), plus the list of per-layer weights
        if return_weights: (batch, heads, n, n) for softmax, the band (batch,
        heads, n, window) for "window", None for "linear"."""
        tokens = np.asarray(tokens)
        checks.tiny_tokens(tokens, self.vocab_size, self.max_len, self.positions)
        if head_mask is not None:
            head_mask = np.asarray(head_mask)
            checks.head_mask_input(head_mask, self.num_layers, self.num_heads)
        logits, weights = tiny_transformer(
            tokens,
            self.params,
            self.num_heads,
            self.num_layers,
            positions=self.positions,
            mlp=self.mlp,
            layer_norm=self.layer_norm,
            head_mask=head_mask,
            attention=self.attention,
            window=self.window,
        )
        return (logits, weights) if return_weights else logits


def previous_token_score(weights):
    """(heads,): each head's mean weight on the previous token, over the
    batch and the queries i >= 1 (weights[b, h, i, i - 1]); 1 = a pure
    previous-token head. weights (batch, heads, n, n), n >= 2."""
    weights = np.asarray(weights)
    checks.head_weights_input(weights)
    n = weights.shape[-1]
    rows = np.arange(1, n)
    return weights[:, :, rows, rows - 1].mean(axis=(0, 2))


def induction_score(weights, tokens):
    """(heads,): each head's mean weight on the token AFTER an earlier copy of
    the current token, sum over j < i with tokens[b, j] == tokens[b, i] of
    weights[b, h, i, j + 1], averaged over the queries (b, i) whose token
    occurred before; 1 = a pure induction head. weights (batch, heads, n, n),
    tokens int (batch, n); no repeated token -> ValueError."""
    weights, tokens = np.asarray(weights), np.asarray(tokens)
    checks.induction_score_inputs(weights, tokens)
    n = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, i, j)
    earlier = same & np.tri(n, k=-1, dtype=bool)  # j < i
    repeated = earlier.any(axis=2)  # (batch, i): the set Q
    checks.check_repeated_tokens(int(repeated.sum()), tokens.shape)
    # j + 1 <= i for every j < i: pair key column j with weight column j + 1
    total = np.einsum("bij,bhij->h", earlier[:, :, :-1], weights[..., 1:])
    return total / repeated.sum()
