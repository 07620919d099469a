"""Single-head attention layers as torch.nn.Modules.

Weights are (in, out) matrices -- x @ W -- as nn.Parameters W_q, W_k, W_v
(xavier-uniform, the PyTorch name of Keras' glorot_uniform), or bias-free
nn.Linear sublayers in CustomAttentionDense:

    Q = X_q W_q, K = X_k W_k, V = X_v W_v,  outputs = softmax(Q K^T / sqrt(d_k)) V.

Unlike Keras, PyTorch creates weights at construction, so the input sizes
are required.
"""

import numpy as np
import torch
from torch import nn

from attncourse import checks

from .pooling import scaled_dot_product_attention

__all__ = [
    "CrossAttention",
    "CustomAttention",
    "CustomAttentionDense",
    "StatisticalAttention",
    "get_weights_numpy",
    "set_weights_numpy",
]

_NAMES = ("W_q", "W_k", "W_v")


def _float_input(name, x, dim_name, dim):
    x = torch.as_tensor(x)
    checks.check_float(name, x)
    checks.check_sequence(name, checks.shape_of(x), dim_name, dim)
    return x


def _generator(seed):
    """A seeded CPU generator for the init, or None (torch's global RNG)."""
    return None if seed is None else torch.Generator().manual_seed(int(seed))


def _param(shape, generator):
    w = nn.Parameter(torch.empty(shape))
    nn.init.xavier_uniform_(w, generator=generator)
    return w


class _Attention(nn.Module):
    """Shared machinery: weights as (in, out) parameters, attention."""

    def _create(self, shapes, seed):
        generator = _generator(seed)
        for name, shape in zip(_NAMES, shapes, strict=True):
            setattr(self, name, _param(shape, generator))

    def kernels(self) -> dict:
        """{"W_q", "W_k", "W_v"} -> the weights in (in, out) layout."""
        return {name: getattr(self, name) for name in _NAMES}

    def weight_shapes(self) -> dict:
        """{"W_q", "W_k", "W_v"} -> (in, out) shapes."""
        return {k: checks.shape_of(v) for k, v in self.kernels().items()}

    def _attend(self, xq, xk, xv, attention_mask, return_weights):
        w = self.kernels()
        q = xq @ w["W_q"].to(xq.dtype)
        k = xk @ w["W_k"].to(xq.dtype)
        v = xv @ w["W_v"].to(xq.dtype)
        out, weights = scaled_dot_product_attention(q, k, v, mask=attention_mask)
        return (out, weights) if return_weights else out


def _check_sizes(**sizes):
    for name, value in sizes.items():
        checks.check_count(name, value)


class CustomAttention(_Attention):
    """Single-head self-attention with nn.Parameters W_q, W_k, W_v.

    d_k: query/key size; d_v: output size; input_dim: feature size of the
    inputs (required -- ValueError if None); seed: int for a reproducible init,
    None = torch's global RNG. Weights: W_q, W_k (input_dim, d_k), W_v
    (input_dim, d_v), xavier-uniform.

    ``layer(inputs, attention_mask=None, return_weights=False)``: inputs
    (batch, seq, input_dim); attention_mask bool (True = attend) broadcastable
    to (batch, seq, seq). Returns outputs (batch, seq, d_v), or (outputs,
    weights (batch, seq, seq)). ``attention_mask`` rather than ``mask`` keeps
    the name of the Keras twin, where a call argument called ``mask`` would be
    filled automatically by upstream masking layers.
    """

    def __init__(self, d_k, d_v, input_dim=None, seed=None):
        super().__init__()
        _check_sizes(d_k=d_k, d_v=d_v)
        checks.check_required_dim("input_dim", input_dim)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        self._build(seed)

    def _build(self, seed):
        n = self.input_dim
        self._create([(n, self.d_k), (n, self.d_k), (n, self.d_v)], seed)

    def forward(self, inputs, attention_mask=None, return_weights=False):
        """inputs (batch, seq, input_dim) -> (batch, seq, d_v) [, weights]."""
        x = _float_input("inputs", inputs, "input_dim", self.input_dim)
        return self._attend(x, x, x, attention_mask, return_weights)


class CustomAttentionDense(CustomAttention):
    """CustomAttention written with nn.Linear(bias=False) sublayers W_q/W_k/W_v.

    Same maths and parameter count. Note the layout: nn.Linear stores
    ``weight`` as (out, in) and computes x @ weight.T, the transpose of a Keras
    Dense kernel (in, out); ``kernels()`` and get/set_weights_numpy return
    and take the (in, out) layout. The weights are re-initialised
    xavier-uniform (nn.Linear's default is kaiming-uniform) to match Keras.
    """

    def _build(self, seed):
        generator = _generator(seed)
        for name, units in zip(_NAMES, (self.d_k, self.d_k, self.d_v), strict=True):
            linear = nn.Linear(self.input_dim, units, bias=False)
            nn.init.xavier_uniform_(linear.weight, generator=generator)
            setattr(self, name, linear)

    def kernels(self):
        """{"W_q", "W_k", "W_v"} -> weight.T views, (in, out) layout."""
        return {name: getattr(self, name).weight.T for name in _NAMES}


class CrossAttention(_Attention):
    """Cross-attention: queries from sequence A, keys and values from B.

    d_k, d_v as in CustomAttention; input_dim: features of A (required);
    context_dim: features of B (defaults to input_dim). Weights: W_q
    (input_dim, d_k), W_k (context_dim, d_k), W_v (context_dim, d_v).

    ``layer(inputs, context, attention_mask=None, return_weights=False)``:
    inputs A (batch, len_a, input_dim), context B (batch, len_b, context_dim),
    mask broadcastable to (batch, len_a, len_b). Returns outputs
    (batch, len_a, d_v) [, weights (batch, len_a, len_b)].
    """

    def __init__(self, d_k, d_v, input_dim=None, context_dim=None, seed=None):
        super().__init__()
        _check_sizes(d_k=d_k, d_v=d_v)
        checks.check_required_dim("input_dim", input_dim)
        context_dim = input_dim if context_dim is None else context_dim
        checks.check_count("context_dim", context_dim)
        self.d_k, self.d_v = d_k, d_v
        self.input_dim, self.context_dim = input_dim, context_dim
        self._create(self._shapes(input_dim, context_dim), seed)

    def _shapes(self, a, b):
        return [(a, self.d_k), (b, self.d_k), (b, self.d_v)]

    def forward(self, inputs, context, attention_mask=None, return_weights=False):
        """inputs (b, len_a, input_dim), context (b, len_b, context_dim)."""
        a = _float_input("inputs", inputs, "input_dim", self.input_dim)
        b = _float_input("context", context, "context_dim", self.context_dim)
        checks.check_same_dtype(inputs=a, context=b)
        checks.check_same_batch("inputs", checks.shape_of(a), "context",
                                checks.shape_of(b))
        return self._attend(a, b, b, attention_mask, return_weights)


class StatisticalAttention(CrossAttention):
    """The "statistical modelling" variant: Q from B, K from A, V from [A; B].

    a (batch, seq, input_dim), b (batch, seq, context_dim) must have the same
    batch size and length (their features are concatenated). Weights: W_q
    (context_dim, d_k), W_k (input_dim, d_k), W_v (input_dim + context_dim,
    d_v); context_dim defaults to input_dim.

    ``layer(a, b, attention_mask=None, return_weights=False)`` -> outputs
    (batch, seq, d_v) [, weights (batch, seq, seq)]: query i (from b) scores
    every key j (from a) and averages the joint vectors [a_j; b_j] W_v.
    """

    def _shapes(self, a, b):
        return [(b, self.d_k), (a, self.d_k), (a + b, self.d_v)]

    def forward(self, a, b, attention_mask=None, return_weights=False):
        """a (batch, seq, input_dim), b (batch, seq, context_dim)."""
        a = _float_input("a", a, "input_dim", self.input_dim)
        b = _float_input("b", b, "context_dim", self.context_dim)
        checks.check_same_dtype(a=a, b=b)
        checks.check_same_length("a", checks.shape_of(a), "b", checks.shape_of(b))
        joint = torch.cat([a, b], dim=-1)
        return self._attend(b, a, joint, attention_mask, return_weights)


def get_weights_numpy(layer) -> dict:
    """{"W_q", "W_k", "W_v"} -> NumPy copies of the weights, (in, out) layout."""
    return {name: w.detach().cpu().numpy().copy()
            for name, w in layer.kernels().items()}


def set_weights_numpy(layer, weights: dict) -> None:
    """Copy NumPy arrays in (in, out) layout into the layer's parameters.

    ``weights`` needs exactly the keys W_q, W_k, W_v with the layer's shapes;
    anything else raises ValueError naming the key and the shapes. For the
    nn.Linear form the arrays are written transposed into ``weight`` (out, in).
    """
    kernels = layer.kernels()
    checks.check_weight_keys(kernels, weights)
    arrays = {name: np.asarray(w) for name, w in weights.items()}
    for name, w in arrays.items():
        checks.check_float(name, w)
        checks.check_weight(name, checks.shape_of(w),
                            checks.shape_of(kernels[name]))
    with torch.no_grad():
        for name, w in arrays.items():
            kernels[name].copy_(torch.as_tensor(w))
