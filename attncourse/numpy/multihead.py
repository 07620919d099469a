"""Multi-head attention in NumPy (the float64 reference).

queries (batch, n_q, d_q_in), keys (batch, n_k, d_k_in), values (batch, n_k,
d_v_in) are projected to d_model features, split into num_heads heads of
d_model // num_heads features, attended per head with scaled dot products,
concatenated and projected to d_out features:

    head_i = softmax(q_i k_i^T / sqrt(d_head)) v_i,
    outputs = concat(head_1, ..., head_h) @ W_o + b_o.

Masks are boolean, True = attend, and broadcast right-aligned to the weights'
shape (batch, num_heads, n_q, n_k); a 3-D mask is read as (batch, n_q, n_k)
and gets a head axis, so (batch, 1, n_k) padding masks work as everywhere else.
"""

import math

import numpy as np

from attncourse import checks

from .masking import masked_softmax

__all__ = ["MultiHeadAttention", "merge_heads", "multi_head_attention", "split_heads"]


def split_heads(x, num_heads):
    """(batch, n, d_model) -> (batch, num_heads, n, d_model // num_heads).

    Head i gets features i * d_head ... (i + 1) * d_head - 1.
    """
    x = np.asarray(x)
    checks.split_heads_input(x, num_heads)
    batch, n, d_model = x.shape
    x = x.reshape(batch, n, num_heads, d_model // num_heads)
    return x.transpose(0, 2, 1, 3)


def merge_heads(x):
    """(batch, num_heads, n, d_head) -> (batch, n, num_heads * d_head)."""
    x = np.asarray(x)
    checks.check_rank("x", checks.shape_of(x), 4, "(batch, num_heads, n, d_head)")
    batch, num_heads, n, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, n, num_heads * d_head)


def _head_mask(mask):
    """A 3-D (batch, n_q, n_k) mask gets a head axis: (batch, 1, n_q, n_k)."""
    if mask is None:
        return None
    mask = np.asarray(mask)
    return mask[:, None] if mask.ndim == 3 else mask


def multi_head_attention(queries, keys, values, params, num_heads, mask=None):
    """Multi-head scaled dot-product attention with the parameters ``params``.

    params: W_q (d_q_in, d_model), W_k (d_k_in, d_model), W_v (d_v_in,
    d_model), W_o (d_model, d_out); optional biases b_q, b_k, b_v (d_model,)
    and b_o (d_out,). mask: bool, True = attend, broadcastable to
    (batch, num_heads, n_q, n_k); a 3-D mask means (batch, n_q, n_k).
    Returns (outputs (batch, n_q, d_out), weights (batch, num_heads, n_q, n_k)).
    """
    queries, keys, values = (np.asarray(t) for t in (queries, keys, values))
    checks.multi_head_inputs(queries, keys, values, params, num_heads)
    p = {name: np.asarray(v, dtype=queries.dtype) for name, v in params.items()}
    q = split_heads(_project(queries, p, "q"), num_heads)  # (batch, heads, n_q, d_head)
    k = split_heads(_project(keys, p, "k"), num_heads)  # (batch, heads, n_k, d_head)
    v = split_heads(_project(values, p, "v"), num_heads)  # (batch, heads, n_k, d_head)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, _head_mask(mask))  # (batch, heads, n_q, n_k)
    heads = weights @ v  # (batch, heads, n_q, d_head)
    outputs = _project(merge_heads(heads), p, "o")  # (batch, n_q, d_out)
    return outputs, weights


def _project(x, params, c):
    """x @ W_c (+ b_c if present)."""
    y = x @ params[f"W_{c}"]
    return y + params[f"b_{c}"] if f"b_{c}" in params else y


def mha_param_shapes(input_dims, d_model, d_out, use_bias=True):
    """name -> shape: W_q, W_k, W_v (d_in, d_model) for input_dims = (d_q_in,
    d_k_in, d_v_in), W_o (d_model, d_out), and with use_bias b_q, b_k, b_v
    (d_model,), b_o (d_out,). All three frameworks create them in this order."""
    shapes = {f"W_{c}": (d, d_model) for c, d in zip("qkv", input_dims, strict=True)}
    shapes["W_o"] = (d_model, d_out)
    if use_bias:
        shapes.update({f"b_{c}": (d_model,) for c in "qkv"})
        shapes["b_o"] = (d_out,)
    return shapes


def _init(name, shape):
    """Glorot-uniform matrices, zero biases (NumPy's global random state)."""
    if name.startswith("b"):
        return np.zeros(shape)
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return np.random.uniform(-limit, limit, size=shape)


class MultiHeadAttention:
    """Multi-head attention holding its own weights (see multi_head_attention).

    input_dims = (d_q_in, d_k_in, d_v_in) is required: the weights are created
    here. d_out defaults to d_model. ``layer.params`` is the parameter dict
    (glorot-uniform matrices, zero biases; see mha_param_shapes). ``dropout``
    is stored for parity with the TensorFlow and PyTorch layers, which drop
    attention weights while training; the NumPy reference never trains, so it
    does not apply it.
    """

    def __init__(
        self,
        num_heads,
        d_model,
        d_out=None,
        use_bias=True,
        input_dims=None,
        dropout=0.0,
    ):
        self.input_dims = checks.multi_head_sizes(
            num_heads, d_model, input_dims, input_dims_required=True
        )
        checks.check_dropout(dropout)
        self.dropout = dropout
        self.num_heads, self.d_model = num_heads, d_model
        self.d_out = d_model if d_out is None else d_out
        self.use_bias = use_bias
        shapes = mha_param_shapes(self.input_dims, d_model, self.d_out, use_bias)
        self.params = {name: _init(name, shape) for name, shape in shapes.items()}

    def __call__(
        self, queries, keys, values, attention_mask=None, return_weights=False
    ):
        """outputs (batch, n_q, d_out), plus weights if return_weights."""
        outputs, weights = multi_head_attention(
            queries, keys, values, self.params, self.num_heads, attention_mask
        )
        return (outputs, weights) if return_weights else outputs
