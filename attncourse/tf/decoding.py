"""Decoding with a KV cache; multi-query and grouped-query attention (TF/Keras).

Same maths and names as ``attncourse.numpy.decoding``: num_heads query heads
share num_kv_heads key/value heads, query head h reading kv head
h // (num_heads // num_kv_heads) (as keras.layers.GroupQueryAttention repeats
them). A KV cache holds keys and values (batch, num_kv_heads, t, head_dim); a
step's n_new queries are the LAST n_new positions and attend with
causal_mask(n_new, t, align="bottom_right").
"""

import math

import keras
import tensorflow as tf

from attncourse import checks
from attncourse.numpy.decoding import gqa_param_shapes, kv_cache_bytes

from .masking import causal_mask, masked_softmax
from .multihead import _head_mask, _project, merge_heads, split_heads

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "decode_step",
    "grouped_query_attention",
    "kv_cache_bytes",
    "repeat_kv",
]


def repeat_kv(x, num_heads):
    """(batch, num_kv_heads, n, head_dim) -> (batch, num_heads, n, head_dim).

    Query head h gets kv head h // (num_heads // num_kv_heads): each kv head is
    repeated for a group of consecutive query heads (kv 0, 0, 1, 1, ...).
    """
    x = tf.convert_to_tensor(x)
    checks.repeat_kv_inputs(x, num_heads)
    group = num_heads // int(x.shape[1])  # query heads per kv head
    return tf.gather(x, tf.range(num_heads) // group, axis=1)  # one op


def _attend(q, k, v, mask):
    """q (batch, H, n_q, dh) over k, v (batch, G, n_k, dh): heads, weights."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])  # (b, H, n_k, dh)
    scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, _head_mask(mask))  # (batch, H, n_q, n_k)
    return tf.matmul(weights, v), weights  # (batch, H, n_q, dh)


def grouped_query_attention(
    queries, keys, values, params, num_heads, num_kv_heads, mask=None
):
    """Multi-head attention whose num_heads query heads share num_kv_heads
    key/value heads.

    params: W_q (d_q_in, num_heads * head_dim), W_k (d_k_in, num_kv_heads *
    head_dim), W_v (d_v_in, num_kv_heads * head_dim), W_o (num_heads *
    head_dim, d_out); optional biases b_q, b_k, b_v, b_o of their columns.
    mask: bool, True = attend, broadcastable to (batch, num_heads, n_q, n_k);
    a 3-D mask means (batch, n_q, n_k).
    Returns (outputs (batch, n_q, d_out), weights (batch, num_heads, n_q, n_k)).
    """
    queries, keys, values = (tf.convert_to_tensor(t) for t in (queries, keys, values))
    checks.gqa_inputs(queries, keys, values, params, num_heads, num_kv_heads)
    p = {name: tf.cast(w, queries.dtype) for name, w in params.items()}
    q = split_heads(_project(queries, p, "q"), num_heads)  # (b, H, n_q, dh)
    k = split_heads(_project(keys, p, "k"), num_kv_heads)  # (b, G, n_k, dh)
    v = split_heads(_project(values, p, "v"), num_kv_heads)  # (b, G, n_k, dh)
    heads, weights = _attend(q, k, v, mask)
    return _project(merge_heads(heads), p, "o"), weights  # (b, n_q, d_out)


class KVCache:
    """The keys and values of the t tokens seen so far, each (batch,
    num_kv_heads, t, head_dim). ``append`` returns a longer cache (the old
    one is left as it is)."""

    def __init__(self, keys, values):
        keys, values = tf.convert_to_tensor(keys), tf.convert_to_tensor(values)
        checks.kv_cache_inputs(keys, values)
        self.keys, self.values = keys, values

    @property
    def length(self) -> int:
        """t, the number of cached tokens."""
        return int(self.keys.shape[2])

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(
            t.shape.num_elements() * t.dtype.size for t in (self.keys, self.values)
        )

    def append(self, keys, values):
        """A cache of t + n_new tokens: these (batch, num_kv_heads, n_new,
        head_dim) keys and values after the cached ones."""
        keys, values = tf.convert_to_tensor(keys), tf.convert_to_tensor(values)
        checks.kv_cache_append(checks.shape_of(self.keys), keys, values)
        return KVCache(
            tf.concat([self.keys, keys], axis=2),
            tf.concat([self.values, values], axis=2),
        )

    def __repr__(self):
        b, g, t, dh = checks.shape_of(self.keys)
        return f"KVCache(batch={b}, num_kv_heads={g}, length={t}, head_dim={dh})"


def decode_step(x, params, num_heads, num_kv_heads, cache=None, mask=None):
    """Causal grouped-query self-attention over the cache and n_new new tokens.

    x: (batch, n_new, d_model), the new tokens (a prompt chunk or one token);
    params: as for grouped_query_attention; cache: the KVCache of the t_past
    tokens before x, or None (t_past = 0). mask: bool broadcastable to (batch,
    num_heads, n_new, t_past + n_new); default the bottom-right aligned causal
    mask causal_mask(n_new, t_past + n_new, align="bottom_right").
    Returns (outputs (batch, n_new, d_out), the KVCache of all t_past + n_new
    tokens).
    """
    x = tf.convert_to_tensor(x)
    mask = None if mask is None else tf.convert_to_tensor(mask)
    checks.decode_step_inputs(
        x, params, num_heads, num_kv_heads, cache, mask, cache_type=KVCache
    )
    p = {name: tf.cast(w, x.dtype) for name, w in params.items()}
    q = split_heads(_project(x, p, "q"), num_heads)  # (b, H, n_new, dh)
    k = split_heads(_project(x, p, "k"), num_kv_heads)  # (b, G, n_new, dh)
    v = split_heads(_project(x, p, "v"), num_kv_heads)  # (b, G, n_new, dh)
    cache = KVCache(k, v) if cache is None else cache.append(k, v)  # t tokens
    if mask is None:
        mask = causal_mask(x.shape[1], cache.length, align="bottom_right")
    heads, _ = _attend(q, cache.keys, cache.values, mask)
    return _project(merge_heads(heads), p, "o"), cache  # (b, n_new, d_out)


class GroupedQueryAttention(keras.layers.Layer):
    """Causal self-attention with num_kv_heads key/value heads and a KV cache.

    ``layer(x, cache)`` returns (outputs, cache): pass the returned cache to
    the next call, which may bring one token or a chunk of several. The
    weights exist from construction; ``layer.params`` maps the names of
    gqa_param_shapes to Keras variables (glorot-uniform, zero biases).
    """

    def __init__(self, num_heads, num_kv_heads, d_model, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self._allow_non_tensor_positional_args = True  # layer(x, cache)
        checks.gqa_sizes(num_heads, num_kv_heads, d_model)
        self.num_heads, self.num_kv_heads, self.d_model = (
            num_heads,
            num_kv_heads,
            d_model,
        )
        self.head_dim, self.use_bias = d_model // num_heads, use_bias
        shapes = gqa_param_shapes(d_model, num_heads, num_kv_heads, use_bias)
        self._variables_by_name = {
            name: self.add_weight(
                name=name,
                shape=shape,
                initializer="zeros" if name.startswith("b") else "glorot_uniform",
            )
            for name, shape in shapes.items()
        }
        self.built = True

    @property
    def params(self) -> dict:
        """name -> Keras variable, in the layout of grouped_query_attention."""
        return dict(self._variables_by_name)

    def call(self, x, cache=None, attention_mask=None):
        """(outputs (batch, n_new, d_model), KVCache of all tokens so far)."""
        return decode_step(
            x, self.params, self.num_heads, self.num_kv_heads, cache, attention_mask
        )

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "d_model": self.d_model,
            "use_bias": self.use_bias,
        }
