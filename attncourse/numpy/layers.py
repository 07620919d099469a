"""Single-head attention layers as plain NumPy classes (the reference).

Each layer holds its parameters W_q, W_k, W_v in ``layer.params``, NumPy arrays
in (in, out) layout -- x @ W -- initialised glorot-uniform from ``seed`` (None:
NumPy's global random state, which ``attncourse.set_seed`` seeds). Calling a
layer computes scaled dot-product attention in the inputs' dtype:

    Q = X_q W_q, K = X_k W_k, V = X_v W_v,  outputs = softmax(Q K^T / sqrt(d_k)) V.
"""

import math

import numpy as np

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


def _glorot(shapes, seed):
    """name -> glorot-uniform array, drawn in the order of ``shapes``."""
    rng = np.random if seed is None else np.random.default_rng(seed)
    params = {}
    for name, shape in shapes.items():
        limit = math.sqrt(6.0 / (shape[0] + shape[1]))
        params[name] = rng.uniform(-limit, limit, size=shape)
    return params


class AttentionLayer:
    """The shared base: parameters W_q, W_k, W_v and the three projections."""

    def param_shapes(self) -> dict:
        """{"W_q": (in, d_k), "W_k": (in, d_k), "W_v": (in, d_v)}."""
        raise NotImplementedError

    @property
    def W_q(self):
        return self.params["W_q"]

    @property
    def W_k(self):
        return self.params["W_k"]

    @property
    def W_v(self):
        return self.params["W_v"]

    def project(self, xq, xk, xv):
        """Q = X_q W_q, K = X_k W_k, V = X_v W_v, in the inputs' dtype."""
        p = {name: w.astype(xq.dtype, copy=False) for name, w in self.params.items()}
        return xq @ p["W_q"], xk @ p["W_k"], xv @ p["W_v"]


class SelfAttention(AttentionLayer):
    """Single-head self-attention with parameters W_q, W_k, W_v.

    d_k: query/key size; d_v: output size; input_dim: feature size of the
    inputs (required: the parameters are created at construction); seed: int
    for a reproducible glorot-uniform init, None = NumPy's global random
    state. Parameters: W_q, W_k (input_dim, d_k), W_v (input_dim, d_v).

    ``layer(inputs, attention_mask=None, return_weights=False)``: inputs
    (batch, seq, input_dim); attention_mask bool (True = attend) broadcastable
    to (batch, seq, seq). Returns outputs (batch, seq, d_v), or (outputs,
    weights (batch, seq, seq)). The argument is called ``attention_mask``, not
    ``mask``, because Keras fills a call argument named ``mask`` automatically
    from upstream masking layers (the tf twin must avoid that; names match).
    """

    def __init__(self, d_k, d_v, input_dim=None, seed=None):
        checks.attention_layer_sizes(d_k, d_v, input_dim, input_dim_required=True)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        self.params = _glorot(self.param_shapes(), seed)

    def param_shapes(self):
        """W_q, W_k: (input_dim, d_k); W_v: (input_dim, d_v)."""
        n = self.input_dim
        return {"W_q": (n, self.d_k), "W_k": (n, self.d_k), "W_v": (n, self.d_v)}

    def __call__(self, inputs, attention_mask=None, return_weights=False):
        """inputs (batch, seq, input_dim) -> (batch, seq, d_v) [, weights]."""
        inputs = np.asarray(inputs)
        checks.sequence_input("inputs", inputs, "input_dim", self.input_dim)
        queries, keys, values = self.project(inputs, inputs, inputs)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs


class SelfAttentionDense(SelfAttention):
    """The same layer as SelfAttention, written with Dense sublayers in Keras.

    In NumPy a bias-free Dense layer *is* ``x @ W``, so the maths, the
    parameters and their shapes are identical to SelfAttention.
    """


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
        context_dim = input_dim if context_dim is None else context_dim
        checks.attention_layer_sizes(
            d_k, d_v, input_dim, context_dim, input_dim_required=True
        )
        self.d_k, self.d_v = d_k, d_v
        self.input_dim, self.context_dim = input_dim, context_dim
        self.params = _glorot(self.param_shapes(), seed)

    def param_shapes(self):
        """W_q: (input_dim, d_k); W_k: (context_dim, d_k); W_v: (context_dim, d_v)."""
        return {
            "W_q": (self.input_dim, self.d_k),
            "W_k": (self.context_dim, self.d_k),
            "W_v": (self.context_dim, self.d_v),
        }

    def __call__(self, inputs, context, attention_mask=None, return_weights=False):
        """inputs (b, len_a, input_dim), context (b, len_b, context_dim)."""
        inputs, context = np.asarray(inputs), np.asarray(context)
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

    def __call__(self, a, b, attention_mask=None, return_weights=False):
        """a (batch, seq, input_dim), b (batch, seq, context_dim)."""
        a, b = np.asarray(a), np.asarray(b)
        checks.statistical_attention_inputs(a, b, self.input_dim, self.context_dim)
        joint = np.concatenate([a, b], axis=-1)  # (batch, seq, in + ctx)
        queries, keys, values = self.project(b, a, joint)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs
