"""Single-head attention layers as plain NumPy classes (the reference).

Each layer holds its weights as NumPy arrays W_q, W_k, W_v in (in, out)
layout -- x @ W -- initialised glorot-uniform from ``seed``. Calling a layer
computes scaled dot-product attention in the inputs' dtype:

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
    "StatisticalAttention",
    "get_weights_numpy",
    "set_weights_numpy",
]


def _glorot(rng, shape):
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return rng.uniform(-limit, limit, size=shape)


def _float_input(name, x, dim_name, dim):
    x = np.asarray(x)
    checks.check_float(name, x)
    checks.check_sequence(name, checks.shape_of(x), dim_name, dim)
    return x


class _Attention:
    """Shared machinery: weights from shapes, projection, attention."""

    def _create(self, seed):
        rng = np.random.default_rng(seed)
        for name, shape in self.weight_shapes().items():
            setattr(self, name, _glorot(rng, shape))

    def weight_shapes(self) -> dict:
        """{"W_q": (in, d_k), "W_k": (in, d_k), "W_v": (in, d_v)}."""
        raise NotImplementedError

    def _attend(self, xq, xk, xv, attention_mask, return_weights):
        dt = xq.dtype
        q = xq @ self.W_q.astype(dt, copy=False)
        k = xk @ self.W_k.astype(dt, copy=False)
        v = xv @ self.W_v.astype(dt, copy=False)
        out, weights = scaled_dot_product_attention(q, k, v, mask=attention_mask)
        return (out, weights) if return_weights else out


class CustomAttention(_Attention):
    """Single-head self-attention with weight matrices W_q, W_k, W_v.

    d_k: query/key size; d_v: output size; input_dim: feature size of the
    inputs (required: weights are created at construction); seed: for the
    glorot-uniform init. Weights: W_q, W_k (input_dim, d_k), W_v (input_dim,
    d_v).

    ``layer(inputs, attention_mask=None, return_weights=False)``: inputs
    (batch, seq, input_dim); attention_mask bool (True = attend) broadcastable
    to (batch, seq, seq). Returns outputs (batch, seq, d_v), or (outputs,
    weights (batch, seq, seq)). The argument is called ``attention_mask``, not
    ``mask``, because Keras fills a call argument named ``mask`` automatically
    from upstream masking layers (the tf twin must avoid that; names match).
    """

    def __init__(self, d_k, d_v, input_dim=None, *, seed=0):
        for name, value in (("d_k", d_k), ("d_v", d_v)):
            checks.check_count(name, value)
        checks.check_required_dim("input_dim", input_dim)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        self._create(seed)

    def weight_shapes(self):
        """W_q, W_k: (input_dim, d_k); W_v: (input_dim, d_v)."""
        n = self.input_dim
        return {"W_q": (n, self.d_k), "W_k": (n, self.d_k), "W_v": (n, self.d_v)}

    def __call__(self, inputs, attention_mask=None, return_weights=False):
        """inputs (batch, seq, input_dim) -> (batch, seq, d_v) [, weights]."""
        x = _float_input("inputs", inputs, "input_dim", self.input_dim)
        return self._attend(x, x, x, attention_mask, return_weights)


class CustomAttentionDense(CustomAttention):
    """The same layer as CustomAttention, written with Dense sublayers in Keras.

    In NumPy a bias-free Dense layer *is* ``x @ W``, so the maths, the
    parameters and the weight shapes are identical to CustomAttention.
    """


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

    def __init__(self, d_k, d_v, input_dim=None, context_dim=None, *, seed=0):
        for name, value in (("d_k", d_k), ("d_v", d_v)):
            checks.check_count(name, value)
        checks.check_required_dim("input_dim", input_dim)
        context_dim = input_dim if context_dim is None else context_dim
        checks.check_count("context_dim", context_dim)
        self.d_k, self.d_v = d_k, d_v
        self.input_dim, self.context_dim = input_dim, context_dim
        self._create(seed)

    def weight_shapes(self):
        """W_q: (input_dim, d_k); W_k: (context_dim, d_k); W_v: (context_dim, d_v)."""
        return {"W_q": (self.input_dim, self.d_k),
                "W_k": (self.context_dim, self.d_k),
                "W_v": (self.context_dim, self.d_v)}

    def __call__(self, inputs, context, attention_mask=None, return_weights=False):
        """inputs (b, len_a, input_dim), context (b, len_b, context_dim)."""
        a = _float_input("inputs", inputs, "input_dim", self.input_dim)
        b = _float_input("context", context, "context_dim", self.context_dim)
        checks.check_same_dtype(inputs=a, context=b)
        checks.check_same_batch("inputs", a.shape, "context", b.shape)
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

    def weight_shapes(self):
        """W_q: (context_dim, d_k); W_k: (input_dim, d_k); W_v: (in + ctx, d_v)."""
        return {"W_q": (self.context_dim, self.d_k),
                "W_k": (self.input_dim, self.d_k),
                "W_v": (self.input_dim + self.context_dim, self.d_v)}

    def __call__(self, a, b, attention_mask=None, return_weights=False):
        """a (batch, seq, input_dim), b (batch, seq, context_dim)."""
        a = _float_input("a", a, "input_dim", self.input_dim)
        b = _float_input("b", b, "context_dim", self.context_dim)
        checks.check_same_dtype(a=a, b=b)
        checks.check_same_length("a", a.shape, "b", b.shape)
        joint = np.concatenate([a, b], axis=-1)
        return self._attend(b, a, joint, attention_mask, return_weights)


def get_weights_numpy(layer) -> dict:
    """{"W_q", "W_k", "W_v"} -> copies of the layer's weights, (in, out) layout."""
    return {name: np.array(getattr(layer, name)) for name in layer.weight_shapes()}


def set_weights_numpy(layer, weights: dict) -> None:
    """Copy NumPy arrays in (in, out) layout into the layer.

    ``weights`` needs exactly the keys W_q, W_k, W_v with the layer's shapes;
    anything else raises ValueError naming the key and the shapes.
    """
    shapes = layer.weight_shapes()
    checks.check_weight_keys(shapes, weights)
    arrays = {name: np.asarray(w) for name, w in weights.items()}
    for name, w in arrays.items():
        checks.check_float(name, w)
        checks.check_weight(name, checks.shape_of(w), shapes[name])
    for name, w in arrays.items():
        setattr(layer, name, np.array(w))
