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
    checks.check_rank("x", checks.shape_of(x), 3, "(batch, n, d_model)")
    batch, n, d_model = x.shape
    checks.check_heads(d_model, num_heads)
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
    return mask[:, None] if mask is not None and mask.ndim == 3 else mask


def multi_head_attention(queries, keys, values, params, num_heads, mask=None):
    """Multi-head scaled dot-product attention with the weights in ``params``.

    params: W_q (d_q_in, d_model), W_k (d_k_in, d_model), W_v (d_v_in,
    d_model), W_o (d_model, d_out); optional biases b_q, b_k, b_v (d_model,)
    and b_o (d_out,). mask: bool, True = attend, broadcastable to
    (batch, num_heads, n_q, n_k); a 3-D mask means (batch, n_q, n_k).
    Returns (outputs (batch, n_q, d_out), weights (batch, num_heads, n_q, n_k)).
    """
    queries, keys, values = (np.asarray(t) for t in (queries, keys, values))
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        checks.check_float(name, t)
    checks.check_qkv(*(checks.shape_of(t) for t in (queries, keys, values)))
    params = {k: np.asarray(v, dtype=queries.dtype) for k, v in params.items()}
    checks.check_mha_params({k: v.shape for k, v in params.items()},
                            queries.shape, keys.shape, values.shape, num_heads)
    q, k, v = (_project(x, params, c) for x, c in
               ((queries, "q"), (keys, "k"), (values, "v")))
    q, k, v = (split_heads(t, num_heads) for t in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        mask = _head_mask(np.asarray(mask))
    weights = masked_softmax(scores, mask)  # (batch, num_heads, n_q, n_k)
    return _project(merge_heads(weights @ v), params, "o"), weights


def _project(x, params, c):
    """x @ W_c (+ b_c if present)."""
    y = x @ params[f"W_{c}"]
    return y + params[f"b_{c}"] if f"b_{c}" in params else y


def _glorot(d_in, d_out):
    limit = math.sqrt(6.0 / (d_in + d_out))
    return np.random.uniform(-limit, limit, size=(d_in, d_out))


def _init_params(input_dims, d_model, d_out, use_bias):
    """Glorot-uniform weights and zero biases (NumPy's global random state)."""
    d_q, d_k, d_v = input_dims
    params = {"W_q": _glorot(d_q, d_model), "W_k": _glorot(d_k, d_model),
              "W_v": _glorot(d_v, d_model), "W_o": _glorot(d_model, d_out)}
    if use_bias:
        params.update({f"b_{c}": np.zeros(d_model) for c in "qkv"})
        params["b_o"] = np.zeros(d_out)
    return params


class MultiHeadAttention:
    """Multi-head attention holding its own weights (see multi_head_attention).

    input_dims = (d_q_in, d_k_in, d_v_in) is required: the weights are created
    here. d_out defaults to d_model. ``layer.params`` is the weight dict.
    """

    def __init__(self, num_heads, d_model, d_out=None, use_bias=True,
                 input_dims=None):
        checks.check_positive("d_model", d_model)
        checks.check_heads(d_model, num_heads)
        self.num_heads, self.d_model = num_heads, d_model
        self.d_out = d_model if d_out is None else d_out
        self.use_bias = use_bias
        self.input_dims = checks.check_input_dims(input_dims)
        self.params = _init_params(self.input_dims, d_model, self.d_out, use_bias)

    def __call__(self, queries, keys, values, attention_mask=None,
                 return_weights=False):
        """outputs (batch, n_q, d_out), plus weights if return_weights."""
        outputs, weights = multi_head_attention(
            queries, keys, values, self.params, self.num_heads, attention_mask)
        return (outputs, weights) if return_weights else outputs
