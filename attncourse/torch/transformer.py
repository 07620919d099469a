"""The Transformer block in PyTorch (differentiable with autograd).

Same maths, names and flat parameter dict as ``attncourse.numpy.transformer``:

    norm="pre":  h = x + MHA(LN1(x));   y = h + FFN(LN2(h))   (Xiong et al. 2020)
    norm="post": h = LN1(x + MHA(x));   y = LN2(h + FFN(h))   (Vaswani et al. 2017)

The modules add dropout on the attention weights in training mode (the
weights they return are the undropped ones). Masks are bool, True = attend.
``block_params_to_torch`` gives the state_dict of torch.nn.TransformerEncoderLayer
(or DecoderLayer) holding the same parameters.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attncourse import checks
from attncourse.numpy.transformer import (
    _ffn_params,
    _sub,
    block_param_shapes,
    block_params_to_torch,
)

from .masking import causal_mask
from .multihead import (
    MultiHeadAttention,
    _project,
    merge_heads,
    multi_head_attention,
    split_heads,
)

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
    al. 2016), biased variance. x (..., d), gamma and beta (d,)."""
    x = torch.as_tensor(x)
    gamma, beta = torch.as_tensor(gamma).to(x), torch.as_tensor(beta).to(x)
    checks.norm_inputs(x, gamma, beta)
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def rms_norm(x, gamma, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis (Zhang & Sennrich
    2019). x (..., d), gamma (d,)."""
    x = torch.as_tensor(x)
    gamma = torch.as_tensor(gamma).to(x)
    checks.norm_inputs(x, gamma)
    return x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps) * gamma


def _activation(x, activation):
    return F.relu(x) if activation == "relu" else F.gelu(x)  # exact GELU (erf)


def feed_forward(x, params, activation="relu"):
    """act(x W_1 + b_1) W_2 + b_2 at every position. x (..., d_model); params
    W_1 (d_model, d_ff), b_1, W_2 (d_ff, d_model), b_2 (or ffn.W_1 ...)."""
    x = torch.as_tensor(x)
    p = {k: torch.as_tensor(v).to(x) for k, v in _ffn_params(params).items()}
    checks.ffn_inputs(x, p, activation)
    hidden = _activation(x @ p["W_1"] + p["b_1"], activation)  # (..., d_ff)
    return hidden @ p["W_2"] + p["b_2"]  # (..., d_model)


def _attention(queries, keys, params, num_heads, mask, drop):
    """MHA of queries over keys (= values); ``drop`` (or None) is applied to
    the weights before they average the values. Returns (outputs, weights)."""
    outputs, weights = multi_head_attention(
        queries, keys, keys, params, num_heads, mask
    )
    if drop is None:
        return outputs, weights
    v = split_heads(_project(keys, params, "v"), num_heads)  # (b, h, m, d_head)
    heads = drop(weights) @ v  # (batch, heads, n, d_head)
    return _project(merge_heads(heads), params, "o"), weights


def sublayer_with_residual(x, sublayer, params, name, norm, eps):
    """One sublayer with its residual connection and its norm ``name``."""
    gamma, beta = params[f"{name}.gamma"], params[f"{name}.beta"]
    if norm == "pre":
        out, weights = sublayer(layer_norm(x, gamma, beta, eps))
        return x + out, weights
    out, weights = sublayer(x)
    return layer_norm(x + out, gamma, beta, eps), weights


def block_forward(
    x, memory, params, num_heads, norm, activation, mask, memory_mask, eps, drop=None
):
    """The encoder block (memory None) or decoder block."""
    p = {k: torch.as_tensor(v).to(x) for k, v in params.items()}

    def attend(name, keys, m):
        return lambda h: _attention(
            h, h if keys is None else keys, _sub(p, name), num_heads, m, drop
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


def _mask(mask, device=None):
    return None if mask is None else torch.as_tensor(mask, device=device)


def transformer_block(
    x, params, num_heads, *, norm="pre", activation="relu", mask=None, eps=1e-5
):
    """One encoder block with the flat dict ``params``; see the NumPy twin.
    Returns (outputs (batch, n, d_model), weights (batch, num_heads, n, n))."""
    x = torch.as_tensor(x)
    mask = _mask(mask, x.device)
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
    """Self-attention, cross-attention to memory, FFN (norm1, norm2, norm3).
    Returns (outputs, self weights, cross weights); see the NumPy twin."""
    x, memory = torch.as_tensor(x), torch.as_tensor(memory)
    mask, memory_mask = _mask(mask, x.device), _mask(memory_mask, x.device)
    checks.block_inputs(x, params, num_heads, norm, activation, mask, memory)
    if memory_mask is not None:
        checks.check_mask_rank(
            checks.shape_of(memory_mask), checks.dtype_name(memory_mask)
        )
    return block_forward(
        x, memory, params, num_heads, norm, activation, mask, memory_mask, eps
    )


def _with_causal(mask, n, causal, device):
    """mask AND the (n, n) causal mask when ``causal`` (mask None = all)."""
    if not causal:
        return mask
    causal = causal_mask(n).to(device)
    if mask is None:
        return causal
    mask = torch.as_tensor(mask, device=device)
    checks.check_mask_rank(checks.shape_of(mask), checks.dtype_name(mask))
    return mask & causal


class _Block(nn.Module):
    """Shared by both blocks: the course's MultiHeadAttention modules hold the
    attention weights; norms and FFN are ParameterDicts (state_dict keys
    attn.params.W_q, norm1.gamma, ffn.W_1, ...)."""

    CROSS = False

    def __init__(
        self, d_model, num_heads, d_ff, norm, activation, causal, dropout, eps
    ):
        super().__init__()
        checks.block_sizes(d_model, num_heads, d_ff, norm, activation, dropout)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.norm, self.activation, self.causal = norm, activation, causal
        self.dropout, self.eps = dropout, eps
        dims = (d_model,) * 3
        self.attn = MultiHeadAttention(num_heads, d_model, input_dims=dims)
        if self.CROSS:
            self.cross = MultiHeadAttention(num_heads, d_model, input_dims=dims)
        shapes = block_param_shapes(d_model, d_ff, cross=self.CROSS)
        groups = {}
        for name, shape in shapes.items():
            group, key = name.split(".")
            if group not in ("attn", "cross"):
                groups.setdefault(group, {})[key] = _init(key, shape)
        for group, params in groups.items():
            setattr(self, group, nn.ParameterDict(params))

    @property
    def params(self) -> dict:
        """name -> parameter, in the flat layout of block_param_shapes."""
        names = block_param_shapes(self.d_model, self.d_ff, cross=self.CROSS)
        params = {}
        for name in names:
            group, key = name.split(".")
            store = getattr(self, group)
            params[name] = (store.params if group in ("attn", "cross") else store)[key]
        return params

    def _dropper(self):
        if not (self.dropout and self.training):
            return None
        return lambda w: F.dropout(w, p=self.dropout, training=True)


def _init(key, shape):
    """gamma 1, beta and biases 0, matrices Glorot (xavier) uniform."""
    if key == "gamma":
        return nn.Parameter(torch.ones(shape))
    if len(shape) == 1:
        return nn.Parameter(torch.zeros(shape))
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


class TransformerBlock(_Block):
    """An encoder block holding its parameters (see transformer_block);
    ``causal=True`` is the decoder-only (GPT) block. ``dropout`` drops
    attention weights in training mode. ``params``: the flat dict of
    block_param_shapes(d_model, d_ff) (Glorot matrices, zero biases, gamma 1,
    beta 0)."""

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
        super().__init__(
            d_model, num_heads, d_ff, norm, activation, causal, dropout, eps
        )

    def forward(self, x, mask=None, return_weights=False):
        """x (batch, n, d_model) -> outputs [, weights (batch, heads, n, n)]."""
        x = torch.as_tensor(x)
        checks.sequence_input("x", x, "d_model", self.d_model)
        mask = _with_causal(_mask(mask, x.device), x.shape[1], self.causal, x.device)
        params = self.params
        checks.block_inputs(x, params, self.num_heads, self.norm, self.activation, mask)
        out, weights = block_forward(
            x,
            None,
            params,
            self.num_heads,
            self.norm,
            self.activation,
            mask,
            None,
            self.eps,
            self._dropper(),
        )
        return (out, weights) if return_weights else out


class DecoderBlock(_Block):
    """A decoder block holding its parameters (see decoder_block): causal
    self-attention (unless causal=False), cross-attention to the memory, FFN.
    ``params``: block_param_shapes(d_model, d_ff, cross=True)."""

    CROSS = True

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
        super().__init__(
            d_model, num_heads, d_ff, norm, activation, causal, dropout, eps
        )

    def forward(self, x, memory, mask=None, memory_mask=None, return_weights=False):
        """x (batch, n, d_model), memory (batch, m, d_model) -> outputs [, self
        weights, cross weights]."""
        x, memory = torch.as_tensor(x), torch.as_tensor(memory)
        checks.sequence_input("x", x, "d_model", self.d_model)
        mask = _with_causal(_mask(mask, x.device), x.shape[1], self.causal, x.device)
        memory_mask = _mask(memory_mask, x.device)
        params = self.params
        checks.block_inputs(
            x, params, self.num_heads, self.norm, self.activation, mask, memory
        )
        if memory_mask is not None:
            checks.check_mask_rank(
                checks.shape_of(memory_mask), checks.dtype_name(memory_mask)
            )
        out, self_w, cross_w = block_forward(
            x,
            memory,
            params,
            self.num_heads,
            self.norm,
            self.activation,
            mask,
            memory_mask,
            self.eps,
            self._dropper(),
        )
        return (out, self_w, cross_w) if return_weights else out
