"""Multi-head attention in TensorFlow / Keras 3 (differentiable, eager).

Same maths and names as ``attncourse.numpy.multihead``:

    head_i = softmax(q_i k_i^T / sqrt(d_head)) v_i,
    outputs = concat(head_1, ..., head_h) @ W_o + b_o.

Masks are boolean, True = attend, broadcast right-aligned to the weights'
shape (batch, num_heads, n_q, n_k); a 3-D mask is read as (batch, n_q, n_k)
and gets a head axis, so (batch, 1, n_k) padding masks work as everywhere else.
"""

import functools
import math

import keras
import tensorflow as tf

from attncourse import checks
from attncourse.numpy.multihead import mha_param_shapes

from .masking import masked_softmax

__all__ = ["MultiHeadAttention", "merge_heads", "multi_head_attention", "split_heads"]


def split_heads(x, num_heads):
    """(batch, n, d_model) -> (batch, num_heads, n, d_model // num_heads).

    Head i gets features i * d_head ... (i + 1) * d_head - 1.
    """
    x = tf.convert_to_tensor(x)
    checks.split_heads_input(x, num_heads)
    _, n, d_model = checks.shape_of(x)
    x = tf.reshape(x, (-1, n, num_heads, d_model // num_heads))
    return tf.transpose(x, (0, 2, 1, 3))


def merge_heads(x):
    """(batch, num_heads, n, d_head) -> (batch, n, num_heads * d_head)."""
    x = tf.convert_to_tensor(x)
    checks.check_rank("x", checks.shape_of(x), 4, "(batch, num_heads, n, d_head)")
    _, num_heads, n, d_head = checks.shape_of(x)
    return tf.reshape(tf.transpose(x, (0, 2, 1, 3)), (-1, n, num_heads * d_head))


def _head_mask(mask):
    """A 3-D (batch, n_q, n_k) mask gets a head axis: (batch, 1, n_q, n_k)."""
    if mask is None:
        return None
    mask = tf.convert_to_tensor(mask)
    return mask[:, None] if mask.shape.rank == 3 else mask


def multi_head_attention(
    queries, keys, values, params, num_heads, mask=None, drop=None
):
    """Multi-head scaled dot-product attention with the parameters ``params``.

    params: W_q (d_q_in, d_model), W_k (d_k_in, d_model), W_v (d_v_in,
    d_model), W_o (d_model, d_out); optional biases b_q, b_k, b_v (d_model,)
    and b_o (d_out,) -- tensors, variables or arrays (cast to the inputs'
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
    scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, _head_mask(mask))  # (batch, heads, n_q, n_k)
    dropped = weights if drop is None else drop(weights)
    heads = tf.matmul(dropped, v)  # (batch, heads, n_q, d_head)
    outputs = _project(merge_heads(heads), p, "o")  # (batch, n_q, d_out)
    return outputs, weights


def _checked_inputs(queries, keys, values, params, num_heads):
    """The inputs as tensors, checked, and the parameters in their dtype (one
    call, so that multi_head_attention reads like the maths)."""
    queries, keys, values = (tf.convert_to_tensor(t) for t in (queries, keys, values))
    checks.multi_head_inputs(queries, keys, values, params, num_heads)
    params = {name: tf.cast(v, queries.dtype) for name, v in params.items()}
    return queries, keys, values, params


def _project(x, params, c):
    """x @ W_c (+ b_c if present)."""
    y = tf.matmul(x, params[f"W_{c}"])
    return y + params[f"b_{c}"] if f"b_{c}" in params else y


class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention holding its own weights (see multi_head_attention).

    input_dims = (d_q_in, d_k_in, d_v_in) creates the weights at once;
    without it Keras creates them at the first call from the inputs' shapes.
    d_out defaults to d_model. ``layer.params`` is the parameter dict
    (glorot-uniform matrices, zero biases; see mha_param_shapes). ``dropout``:
    the rate at which attention weights are dropped while training (Keras
    passes training=True in fit; a direct call can pass it); 0 = none.
    """

    def __init__(
        self,
        num_heads,
        d_model,
        d_out=None,
        use_bias=True,
        input_dims=None,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        input_dims = checks.multi_head_sizes(
            num_heads, d_model, input_dims, input_dims_required=False
        )
        checks.check_dropout(dropout)
        self.dropout = dropout
        self.drop = keras.layers.Dropout(dropout) if dropout else None
        self.num_heads, self.d_model = num_heads, d_model
        self.d_out = d_model if d_out is None else d_out
        self.use_bias, self.input_dims = use_bias, None
        if input_dims is not None:
            self.build(*((None, None, d) for d in input_dims))
            self.built = True

    def build(self, queries_shape, keys_shape, values_shape):
        """Create the parameters for inputs of these shapes (mha_param_shapes)."""
        self.input_dims = tuple(
            int(s[-1]) for s in (queries_shape, keys_shape, values_shape)
        )
        shapes = mha_param_shapes(
            self.input_dims, self.d_model, self.d_out, self.use_bias
        )
        self._variables_by_name = {
            name: self.add_weight(
                name=name,
                shape=shape,
                initializer=("zeros" if name.startswith("b") else "glorot_uniform"),
            )
            for name, shape in shapes.items()
        }

    @property
    def params(self) -> dict:
        """name -> Keras variable, in the layout of multi_head_attention."""
        if self.input_dims is None:
            raise ValueError(
                "MultiHeadAttention has no weights yet: call it once or pass "
                "input_dims=(d_q_in, d_k_in, d_v_in) to the constructor"
            )
        return dict(self._variables_by_name)

    def call(
        self,
        queries,
        keys,
        values,
        attention_mask=None,
        return_weights=False,
        training=None,
    ):
        """outputs (batch, n_q, d_out), plus weights if return_weights."""
        drop = None
        if self.drop is not None and training:
            drop = functools.partial(self.drop, training=True)
        outputs, weights = multi_head_attention(
            queries, keys, values, self.params, self.num_heads, attention_mask, drop
        )
        return (outputs, weights) if return_weights else outputs

    def compute_output_spec(
        self,
        queries,
        keys,
        values,
        attention_mask=None,
        return_weights=False,
        training=None,
    ):
        batch, n_q = queries.shape[:2]
        out = keras.KerasTensor((batch, n_q, self.d_out), dtype=self.compute_dtype)
        if not return_weights:
            return out
        w_shape = (batch, self.num_heads, n_q, keys.shape[1])
        return out, keras.KerasTensor(w_shape, dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_model": self.d_model,
            "d_out": self.d_out,
            "use_bias": self.use_bias,
            "input_dims": self.input_dims,
            "dropout": self.dropout,
        }
