"""Multi-head attention in PyTorch (differentiable with autograd).

Same maths and names as ``attncourse.numpy.multihead``:

    head_i = softmax(q_i k_i^T / sqrt(d_head)) v_i,
    outputs = concat(head_1, ..., head_h) @ W_o + b_o.

Masks are boolean, True = attend, broadcast right-aligned to the weights'
shape (batch, num_heads, n_q, n_k); a 3-D mask is read as (batch, n_q, n_k)
and gets a head axis, so (batch, 1, n_k) padding masks work as everywhere else.
"""

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from attncourse import checks
from attncourse.numpy.multihead import mha_param_shapes

from .masking import masked_softmax

__all__ = ["MultiHeadAttention", "merge_heads", "multi_head_attention", "split_heads"]


def split_heads(x, num_heads):
    """(batch, n, d_model) -> (batch, num_heads, n, d_model // num_heads).

    Head i gets features i * d_head ... (i + 1) * d_head - 1.
    """
    x = torch.as_tensor(x)
    checks.split_heads_input(x, num_heads)
    batch, n, d_model = x.shape
    return x.reshape(batch, n, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x):
    """(batch, num_heads, n, d_head) -> (batch, n, num_heads * d_head)."""
    x = torch.as_tensor(x)
    checks.check_rank("x", checks.shape_of(x), 4, "(batch, num_heads, n, d_head)")
    batch, num_heads, n, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, n, num_heads * d_head)


def _head_mask(mask, device):
    """A 3-D (batch, n_q, n_k) mask gets a head axis: (batch, 1, n_q, n_k)."""
    if mask is None:
        return None
    mask = torch.as_tensor(mask, device=device)
    return mask[:, None] if mask.dim() == 3 else mask


def multi_head_attention(
    queries, keys, values, params, num_heads, mask=None, drop=None
):
    """Multi-head scaled dot-product attention with the parameters ``params``.

    params: W_q (d_q_in, d_model), W_k (d_k_in, d_model), W_v (d_v_in,
    d_model), W_o (d_model, d_out); optional biases b_q, b_k, b_v (d_model,)
    and b_o (d_out,) -- tensors, parameters or arrays (cast to the inputs'
    dtype). mask: bool, True = attend, broadcastable to (batch, num_heads,
    n_q, n_k); a 3-D mask means (batch, n_q, n_k). drop: None, or a function
    applied to the weights before they mix the values (attention dropout).
    Returns (outputs (batch, n_q, d_out), weights (batch, num_heads, n_q, n_k)),
    the weights as the softmax gave them (not dropped).
    """
    queries, keys, values, p = _checked_inputs(queries, keys, values, params, num_heads)
    q = split_heads(_project(queries, p, "q"), num_heads)  # (batch, heads, n_q, d_head)
    k = split_heads(_project(keys, p, "k"), num_heads)  # (batch, heads, n_k, d_head)
    v = split_heads(_project(values, p, "v"), num_heads)  # (batch, heads, n_k, d_head)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, _head_mask(mask, scores.device))
    heads = (weights if drop is None else drop(weights)) @ v  # (b, h, n_q, d_head)
    outputs = _project(merge_heads(heads), p, "o")  # (batch, n_q, d_out)
    return outputs, weights


def _checked_inputs(queries, keys, values, params, num_heads):
    """The inputs as tensors, checked, and the parameters in their dtype (one
    call, so that multi_head_attention reads like the maths)."""
    queries, keys, values = (torch.as_tensor(t) for t in (queries, keys, values))
    checks.multi_head_inputs(queries, keys, values, params, num_heads)
    params = {name: torch.as_tensor(v).to(queries) for name, v in params.items()}
    return queries, keys, values, params


def _project(x, params, c):
    """x @ W_c (+ b_c if present)."""
    y = x @ params[f"W_{c}"]
    return y + params[f"b_{c}"] if f"b_{c}" in params else y


class MultiHeadAttention(nn.Module):
    """Multi-head attention holding its own weights (see multi_head_attention).

    input_dims = (d_q_in, d_k_in, d_v_in) is required: the weights are created
    here. d_out defaults to d_model. ``layer.params`` is an nn.ParameterDict
    (glorot-uniform matrices, zero biases; see mha_param_shapes). ``dropout``:
    the rate at which attention weights are dropped in training mode
    (``module.train()``); 0 = none.
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
        super().__init__()
        self.input_dims = checks.multi_head_sizes(
            num_heads, d_model, input_dims, input_dims_required=True
        )
        checks.check_dropout(dropout)
        self.dropout = dropout
        self.num_heads, self.d_model = num_heads, d_model
        self.d_out = d_model if d_out is None else d_out
        self.use_bias = use_bias
        shapes = mha_param_shapes(self.input_dims, d_model, self.d_out, use_bias)
        self.params = nn.ParameterDict(
            {name: nn.Parameter(torch.empty(shape)) for name, shape in shapes.items()}
        )
        for name, p in self.params.items():
            if name.startswith("b"):
                nn.init.zeros_(p)
            else:
                nn.init.xavier_uniform_(p)

    def forward(self, queries, keys, values, attention_mask=None, return_weights=False):
        """outputs (batch, n_q, d_out), plus weights if return_weights."""
        drop = None
        if self.dropout and self.training:
            drop = functools.partial(F.dropout, p=self.dropout, training=True)
        outputs, weights = multi_head_attention(
            queries,
            keys,
            values,
            dict(self.params),
            self.num_heads,
            attention_mask,
            drop,
        )
        return (outputs, weights) if return_weights else outputs
