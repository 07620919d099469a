"""Single-head attention layers as torch.nn.Modules.

Parameters are (in, out) matrices -- x @ W -- as nn.Parameters W_q, W_k, W_v
(xavier-uniform, the PyTorch name of Keras' glorot_uniform), or bias-free
nn.Linear sublayers in SelfAttentionDense:

    Q = X_q W_q, K = X_k W_k, V = X_v W_v,  outputs = softmax(Q K^T / sqrt(d_k)) V.

Unlike Keras, PyTorch creates parameters at construction, so the input sizes
are required. ``layer.params`` maps W_q, W_k, W_v to (in, out) tensors.
"""

import torch
from torch import nn

from attncourse import checks

from .pooling import scaled_dot_product_attention

__all__ = [
    "CrossAttention",
    "CustomAttention",
    "CustomAttentionDense",
    "SelfAttention",
    "SelfAttentionDense",
    "StatisticalAttention",
]

_NAMES = ("W_q", "W_k", "W_v")


def _generator(seed):
    """A seeded CPU generator for the init, or None (torch's global RNG)."""
    return None if seed is None else torch.Generator().manual_seed(int(seed))


class AttentionLayer(nn.Module):
    """The shared base: parameters W_q, W_k, W_v and the three projections."""

    def create_params(self, shapes, seed):
        """One xavier-uniform nn.Parameter per name -> (in, out) shape."""
        generator = _generator(seed)
        for name, shape in shapes.items():
            w = nn.Parameter(torch.empty(shape))
            nn.init.xavier_uniform_(w, generator=generator)
            setattr(self, name, w)

    @property
    def params(self) -> dict:
        """{"W_q", "W_k", "W_v"} -> the parameters in (in, out) layout."""
        return {name: getattr(self, name) for name in _NAMES}

    def param_shapes(self) -> dict:
        """{"W_q": (in, d_k), "W_k": (in, d_k), "W_v": (in, d_v)} from the sizes."""
        raise NotImplementedError

    def project(self, xq, xk, xv):
        """Q = X_q W_q, K = X_k W_k, V = X_v W_v, in the inputs' dtype."""
        p = {name: w.to(xq.dtype) for name, w in self.params.items()}
        return xq @ p["W_q"], xk @ p["W_k"], xv @ p["W_v"]


class SelfAttention(AttentionLayer):
    """Single-head self-attention with nn.Parameters W_q, W_k, W_v.

    d_k: query/key size; d_v: output size; input_dim: feature size of the
    inputs (required -- ValueError if None); seed: int for a reproducible init,
    None = torch's global RNG. Parameters: W_q, W_k (input_dim, d_k), W_v
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
        checks.attention_layer_sizes(d_k, d_v, input_dim, input_dim_required=True)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        self.create_params(self.param_shapes(), seed)

    def param_shapes(self):
        """W_q, W_k: (input_dim, d_k); W_v: (input_dim, d_v)."""
        n = self.input_dim
        return {"W_q": (n, self.d_k), "W_k": (n, self.d_k), "W_v": (n, self.d_v)}

    def forward(self, inputs, attention_mask=None, return_weights=False):
        """inputs (batch, seq, input_dim) -> (batch, seq, d_v) [, weights]."""
        inputs = torch.as_tensor(inputs)
        checks.sequence_input("inputs", inputs, "input_dim", self.input_dim)
        queries, keys, values = self.project(inputs, inputs, inputs)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs


class SelfAttentionDense(SelfAttention):
    """SelfAttention written with nn.Linear(bias=False) sublayers W_q/W_k/W_v.

    Same maths and parameter count. Note the layout: nn.Linear stores
    ``weight`` as (out, in) and computes x @ weight.T, the transpose of a Keras
    Dense kernel (in, out); ``layer.params``, get_params and set_params use
    the (in, out) layout. The weights are re-initialised xavier-uniform
    (nn.Linear's default is kaiming-uniform) to match Keras.
    """

    def create_params(self, shapes, seed):
        """One bias-free nn.Linear(in, out) per name, xavier-uniform."""
        generator = _generator(seed)
        for name, (d_in, d_out) in shapes.items():
            linear = nn.Linear(d_in, d_out, bias=False)
            nn.init.xavier_uniform_(linear.weight, generator=generator)
            setattr(self, name, linear)

    @property
    def params(self):
        """{"W_q", "W_k", "W_v"} -> weight.T views, (in, out) layout."""
        return {name: getattr(self, name).weight.T for name in _NAMES}


CustomAttention = SelfAttention  # the seed notes' name
CustomAttentionDense = SelfAttentionDense


class CrossAttention(AttentionLayer):
    """Cross-attention: queries from sequence A, keys and values from B.

    d_k, d_v as in SelfAttention; input_dim: features of A (required);
    context_dim: features of B (defaults to input_dim). Parameters: W_q
    (input_dim, d_k), W_k (context_dim, d_k), W_v (context_dim, d_v).

    ``layer(inputs, context, attention_mask=None, return_weights=False)``:
    inputs A (batch, len_a, input_dim), context B (batch, len_b, context_dim),
    mask broadcastable to (batch, len_a, len_b). Returns outputs
    (batch, len_a, d_v) [, weights (batch, len_a, len_b)].
    """

    def __init__(self, d_k, d_v, input_dim=None, context_dim=None, seed=None):
        super().__init__()
        context_dim = input_dim if context_dim is None else context_dim
        checks.attention_layer_sizes(
            d_k, d_v, input_dim, context_dim, input_dim_required=True
        )
        self.d_k, self.d_v = d_k, d_v
        self.input_dim, self.context_dim = input_dim, context_dim
        self.create_params(self.param_shapes(), seed)

    def param_shapes(self):
        """W_q: (input_dim, d_k); W_k: (context_dim, d_k); W_v: (context_dim, d_v)."""
        return {
            "W_q": (self.input_dim, self.d_k),
            "W_k": (self.context_dim, self.d_k),
            "W_v": (self.context_dim, self.d_v),
        }

    def forward(self, inputs, context, attention_mask=None, return_weights=False):
        """inputs (b, len_a, input_dim), context (b, len_b, context_dim)."""
        inputs, context = torch.as_tensor(inputs), torch.as_tensor(context)
        checks.cross_attention_inputs(inputs, context, self.input_dim, self.context_dim)
        queries, keys, values = self.project(inputs, context, context)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs


class StatisticalAttention(CrossAttention):
    """The "statistical modelling" variant: Q from B, K from A, V from [A; B].

    a (batch, seq, input_dim), b (batch, seq, context_dim) must have the same
    batch size and length (their features are concatenated). Parameters: W_q
    (context_dim, d_k), W_k (input_dim, d_k), W_v (input_dim + context_dim,
    d_v); context_dim defaults to input_dim.

    ``layer(a, b, attention_mask=None, return_weights=False)`` -> outputs
    (batch, seq, d_v) [, weights (batch, seq, seq)]: query i (from b) scores
    every key j (from a) and averages the joint vectors [a_j; b_j] W_v.
    """

    def param_shapes(self):
        """W_q: (context_dim, d_k); W_k: (input_dim, d_k); W_v: (in + ctx, d_v)."""
        return {
            "W_q": (self.context_dim, self.d_k),
            "W_k": (self.input_dim, self.d_k),
            "W_v": (self.input_dim + self.context_dim, self.d_v),
        }

    def forward(self, a, b, attention_mask=None, return_weights=False):
        """a (batch, seq, input_dim), b (batch, seq, context_dim)."""
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        checks.statistical_attention_inputs(a, b, self.input_dim, self.context_dim)
        joint = torch.cat([a, b], dim=-1)  # (batch, seq, in + ctx)
        queries, keys, values = self.project(b, a, joint)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs
