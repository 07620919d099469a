"""The Transformer block in NumPy (the float64 reference, no dropout).

x (batch, n, d_model), row vectors, weights x @ W. One block is two
sublayers, multi-head self-attention and a position-wise feed-forward network
(FFN), each inside a residual connection with a layer norm:

    norm="pre":  h = x + MHA(LN1(x));   y = h + FFN(LN2(h))   (Xiong et al. 2020)
    norm="post": h = LN1(x + MHA(x));   y = LN2(h + FFN(h))   (Vaswani et al. 2017)

FFN(x) = act(x W_1 + b_1) W_2 + b_2 with act = ReLU or the exact (erf) GELU.
The parameters are one flat dict (``block_param_shapes``): attn.W_q ...
attn.b_o (the layout of ``multi_head_attention``), norm1.gamma, norm1.beta,
ffn.W_1, ffn.b_1, ffn.W_2, ffn.b_2, norm2.gamma, norm2.beta. A decoder block
adds cross.* (attention from x to the encoder's memory) and norm3.*; norm i
belongs to sublayer i (self-attention, cross-attention, FFN), as in
torch.nn.TransformerDecoderLayer. Masks are bool, True = attend.
"""

import math

import numpy as np

from attncourse import checks

from .masking import causal_mask
from .multihead import multi_head_attention
from .weights import mha_params_to_torch

__all__ = [
    "DecoderBlock",
    "TransformerBlock",
    "block_param_shapes",
    "block_params_to_torch",
    "decoder_block",
    "feed_forward",
    "layer_norm",
    "rms_norm",
    "transformer_block",
]


def layer_norm(x, gamma, beta, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (Ba et
    al. 2016); var is the biased variance, as in every framework's LayerNorm.
    x (..., d), gamma and beta (d,)."""
    x, gamma, beta = (np.asarray(t) for t in (x, gamma, beta))
    checks.norm_inputs(x, gamma, beta)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rms_norm(x, gamma, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis (Zhang & Sennrich
    2019): no centring, no beta. x (..., d), gamma (d,)."""
    x, gamma = np.asarray(x), np.asarray(gamma)
    checks.norm_inputs(x, gamma)
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * gamma


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _activation(x, activation):
    if activation == "relu":
        return np.maximum(x, 0.0)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))  # exact GELU


def _ffn_params(params):
    """Accept W_1 ... b_2 or the block's ffn.W_1 ... ffn.b_2."""
    if params and all(k.startswith("ffn.") for k in params):
        return {k[4:]: v for k, v in params.items()}
    return dict(params)


def feed_forward(x, params, activation="relu"):
    """act(x W_1 + b_1) W_2 + b_2, the same two-layer net at every position.

    x (..., d_model); params W_1 (d_model, d_ff), b_1 (d_ff,), W_2 (d_ff,
    d_model), b_2 (d_model,) -- or the same four named ffn.W_1 ... ffn.b_2;
    activation "relu" or "gelu" (exact, with erf). Returns (..., d_model).
    """
    x = np.asarray(x)
    p = {k: np.asarray(v) for k, v in _ffn_params(params).items()}
    checks.ffn_inputs(x, p, activation)
    hidden = _activation(x @ p["W_1"] + p["b_1"], activation)  # (..., d_ff)
    return hidden @ p["W_2"] + p["b_2"]  # (..., d_model)


def block_param_shapes(d_model, d_ff, *, cross=False):
    """name -> shape of a block's flat parameter dict (module docstring);
    ``cross=True`` for a decoder block (adds cross.* and norm3.*)."""
    return checks.block_shapes(d_model, d_ff, cross)


def _sub(params, prefix):
    """The entries of a flat dict under ``prefix + '.'``, prefix removed."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in params.items() if k.startswith(prefix + ".")}


def sublayer_with_residual(x, sublayer, params, name, norm, eps):
    """One sublayer with its residual connection and its norm ``name``."""
    gamma, beta = params[f"{name}.gamma"], params[f"{name}.beta"]
    if norm == "pre":
        out, weights = sublayer(layer_norm(x, gamma, beta, eps))
        return x + out, weights
    out, weights = sublayer(x)
    return layer_norm(x + out, gamma, beta, eps), weights


def block_forward(
    x, memory, params, num_heads, norm, activation, mask, memory_mask, eps
):
    """The encoder block (memory None) or decoder block; returns (y, weights)."""
    p = {k: np.asarray(v, dtype=x.dtype) for k, v in params.items()}

    def attend(name, keys, m):
        return lambda h: multi_head_attention(
            h,
            h if keys is None else keys,
            h if keys is None else keys,
            _sub(p, name),
            num_heads,
            m,
        )

    def ffn(h):
        return feed_forward(h, _sub(p, "ffn"), activation), None

    h, self_weights = sublayer_with_residual(
        x, attend("attn", None, mask), p, "norm1", norm, eps
    )
    if memory is None:
        y, _ = sublayer_with_residual(h, ffn, p, "norm2", norm, eps)
        return y, self_weights
    h, cross = sublayer_with_residual(
        h, attend("cross", memory, memory_mask), p, "norm2", norm, eps
    )
    y, _ = sublayer_with_residual(h, ffn, p, "norm3", norm, eps)
    return y, self_weights, cross


def transformer_block(
    x, params, num_heads, *, norm="pre", activation="relu", mask=None, eps=1e-5
):
    """One encoder block (module docstring) with the flat dict ``params``.

    x (batch, n, d_model); mask bool, True = attend, broadcastable to
    (batch, num_heads, n, n) (a 3-D mask means (batch, n, n); a causal mask
    (n, n) makes it the decoder-only block). Returns (outputs (batch, n,
    d_model), self-attention weights (batch, num_heads, n, n)).
    """
    x = np.asarray(x)
    mask = None if mask is None else np.asarray(mask)
    checks.block_inputs(x, params, num_heads, norm, activation, mask)
    return block_forward(x, None, params, num_heads, norm, activation, mask, None, eps)


def decoder_block(
    x,
    memory,
    params,
    num_heads,
    *,
    norm="pre",
    activation="relu",
    mask=None,
    memory_mask=None,
    eps=1e-5,
):
    """A decoder block: self-attention (mask, e.g. causal), cross-attention
    from x to memory (batch, m, d_model) (memory_mask, e.g. padding (batch,
    1, m)), FFN; norm1, norm2, norm3 in that order. Returns (outputs (batch,
    n, d_model), self weights (batch, heads, n, n), cross weights (batch,
    heads, n, m))."""
    x, memory = np.asarray(x), np.asarray(memory)
    mask = None if mask is None else np.asarray(mask)
    memory_mask = None if memory_mask is None else np.asarray(memory_mask)
    checks.block_inputs(x, params, num_heads, norm, activation, mask, memory)
    if memory_mask is not None:
        checks.check_mask_rank(memory_mask.shape, checks.dtype_name(memory_mask))
    return block_forward(
        x, memory, params, num_heads, norm, activation, mask, memory_mask, eps
    )


def block_params_to_torch(params: dict) -> dict:
    """A block's flat params -> a state_dict (NumPy arrays) for
    torch.nn.TransformerEncoderLayer(batch_first=True), or, with cross.*,
    torch.nn.TransformerDecoderLayer.

    torch stores (out, in) matrices: self_attn.* / multihead_attn.* as
    mha_params_to_torch builds them, linear1.weight = ffn.W_1^T (d_ff,
    d_model), linear2.weight = ffn.W_2^T, normK.weight = normK.gamma,
    normK.bias = normK.beta.
    """
    shapes = {k: np.shape(v) for k, v in params.items()}
    d_model = shapes["attn.W_q"][1] if "attn.W_q" in shapes else 0
    cross = any(k.startswith("cross.") for k in params)
    checks.block_params(params, d_model, 1, cross)
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    out = {}
    for ours, theirs in (("attn", "self_attn"), ("cross", "multihead_attn")):
        if ours == "attn" or cross:
            sub = mha_params_to_torch(_sub(p, ours))
            out.update({f"{theirs}.{k}": v for k, v in sub.items()})
    out.update({"linear1.weight": p["ffn.W_1"].T, "linear1.bias": p["ffn.b_1"]})
    out.update({"linear2.weight": p["ffn.W_2"].T, "linear2.bias": p["ffn.b_2"]})
    for norm in ("norm1", "norm2", "norm3") if cross else ("norm1", "norm2"):
        out[f"{norm}.weight"] = p[f"{norm}.gamma"]
        out[f"{norm}.bias"] = p[f"{norm}.beta"]
    return out


def _init(name, shape):
    """Glorot-uniform matrices, zero biases and betas, unit gammas."""
    if name.endswith("gamma"):
        return np.ones(shape)
    if len(shape) == 1:
        return np.zeros(shape)
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return np.random.uniform(-limit, limit, size=shape)


def _init_block(d_model, d_ff, cross):
    """All parameters, drawn in block_param_shapes order (NumPy's RNG)."""
    shapes = block_param_shapes(d_model, d_ff, cross=cross)
    return {name: _init(name, shape) for name, shape in shapes.items()}


class TransformerBlock:
    """An encoder block holding its parameters (see transformer_block).

    ``causal=True`` adds the causal mask: the decoder-only (GPT) block.
    ``params`` is the flat dict of block_param_shapes(d_model, d_ff):
    Glorot-uniform matrices, zero biases, gamma 1, beta 0. NumPy has no
    training mode, so ``dropout`` (on the attention weights) is stored for
    parity with the TF and torch layers and never applied here.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        *,
        norm="pre",
        activation="relu",
        causal=False,
        dropout=0.0,
        eps=1e-5,
    ):
        checks.block_sizes(d_model, num_heads, d_ff, norm, activation, dropout)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.norm, self.activation, self.causal = norm, activation, causal
        self.dropout, self.eps = dropout, eps
        self.params = _init_block(d_model, d_ff, cross=False)

    def __call__(self, x, mask=None, return_weights=False):
        """x (batch, n, d_model) -> outputs [, weights (batch, heads, n, n)]."""
        x = np.asarray(x)
        checks.sequence_input("x", x, "d_model", self.d_model)
        mask = _with_causal(mask, x.shape[1], self.causal)
        out, weights = transformer_block(
            x,
            self.params,
            self.num_heads,
            norm=self.norm,
            activation=self.activation,
            mask=mask,
            eps=self.eps,
        )
        return (out, weights) if return_weights else out


def _with_causal(mask, n, causal):
    """mask AND the (n, n) causal mask when ``causal`` (mask None = all)."""
    if not causal:
        return mask
    if mask is None:
        return causal_mask(n)
    mask = np.asarray(mask)
    checks.check_mask_rank(mask.shape, checks.dtype_name(mask))
    return np.logical_and(mask, causal_mask(n))


class DecoderBlock:
    """A decoder block holding its parameters (see decoder_block): causal
    self-attention (``causal=False`` drops the causal mask), cross-attention to
    the encoder's memory, FFN. ``params``: block_param_shapes(d_model, d_ff,
    cross=True); ``dropout`` as in TransformerBlock (not applied in NumPy)."""

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        *,
        norm="pre",
        activation="relu",
        causal=True,
        dropout=0.0,
        eps=1e-5,
    ):
        checks.block_sizes(d_model, num_heads, d_ff, norm, activation, dropout)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.norm, self.activation, self.causal = norm, activation, causal
        self.dropout, self.eps = dropout, eps
        self.params = _init_block(d_model, d_ff, cross=True)

    def __call__(self, x, memory, mask=None, memory_mask=None, return_weights=False):
        """x (batch, n, d_model), memory (batch, m, d_model) -> outputs [,
        self weights (batch, heads, n, n), cross weights (batch, heads, n, m)]."""
        x = np.asarray(x)
        checks.sequence_input("x", x, "d_model", self.d_model)
        mask = _with_causal(mask, x.shape[1], self.causal)
        out, self_w, cross_w = decoder_block(
            x,
            memory,
            self.params,
            self.num_heads,
            norm=self.norm,
            activation=self.activation,
            mask=mask,
            memory_mask=memory_mask,
            eps=self.eps,
        )
        return (out, self_w, cross_w) if return_weights else out
