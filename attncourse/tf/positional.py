"""Positions in TensorFlow: sinusoidal, learned, RoPE, ALiBi.

Sinusoidal (Vaswani et al., 2017):

    PE[p, 2i]     = sin(p / 10000^(2i / d_model)),
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model)).

The angles are computed in float64 and the table cast to float32: in float32
the angle p / 10000^(2i/d) of position 1000 is off by ~6e-5, and so is its sine.
For odd d_model the last column is a sine with no cosine partner.

Learned absolute positions: a trained table of max_len rows. RoPE (Su et al.,
2021) rotates pairs of query/key features by position-dependent angles (also
computed in float64, then cast); ALiBi (Press et al., 2022) adds
-slope_h * distance to the scores of head h.
"""

import math

import keras
import tensorflow as tf

from attncourse import checks

__all__ = [
    "LearnedPositionalEmbedding",
    "PositionalEncoding",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "sinusoidal_positional_encoding",
]


def sinusoidal_positional_encoding(num_positions, d_model):
    """The table PE of shape (num_positions, d_model), float32."""
    checks.check_count("num_positions", num_positions)
    checks.check_positive("d_model", d_model)
    positions = tf.range(int(num_positions), dtype=tf.float64)[:, None]
    even = tf.range(0, int(d_model), 2, dtype=tf.float64)  # the 2i of each pair
    angles = positions / 10000.0 ** (even / d_model)  # (num_positions, ceil(d/2))
    sin, cos = tf.sin(angles), tf.cos(angles[:, : d_model // 2])
    if d_model % 2:  # pad cos with a column that the interleave then drops
        cos = tf.concat([cos, tf.zeros_like(sin[:, :1])], axis=1)
    pe = tf.reshape(tf.stack([sin, cos], axis=-1), (int(num_positions), -1))
    return tf.cast(pe[:, :d_model], tf.float32)


class PositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal table to inputs (batch, n, d_model), n <= max_len."""

    def __init__(self, d_model, max_len=1000, **kwargs):
        super().__init__(**kwargs)
        checks.check_positive("max_len", max_len)
        self.d_model, self.max_len = d_model, max_len
        self.table = sinusoidal_positional_encoding(max_len, d_model)

    def call(self, x):
        """x (batch, n, d_model) -> x + PE[:n], same shape."""
        x = tf.convert_to_tensor(x)
        checks.positional_input(x, self.d_model, self.max_len)
        return x + tf.cast(self.table[: x.shape[1]], x.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "max_len": self.max_len,
        }


class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned table: x (batch, n, d_model) -> x + table[positions].

    The weight ``table`` has max_len rows (normal, std 0.02); positions
    default to 0 .. n-1 and may be given as (n,) or (batch, n).
    """

    def __init__(self, d_model, max_len, seed=None, **kwargs):
        super().__init__(**kwargs)
        checks.check_positive("d_model", d_model)
        checks.check_positive("max_len", max_len)
        if seed is not None:
            checks.check_count("seed", seed)
        self.d_model, self.max_len, self.seed = d_model, max_len, seed
        self.table = self.add_weight(
            name="table",
            shape=(max_len, d_model),
            initializer=keras.initializers.RandomNormal(stddev=0.02, seed=seed),
        )

    def call(self, x, positions=None):
        """x (batch, n, d_model) -> same shape."""
        x = tf.convert_to_tensor(x)
        if positions is not None:
            positions = tf.convert_to_tensor(positions)
        checks.learned_positions_inputs(x, positions, self.d_model, self.max_len)
        if positions is None:
            positions = tf.range(tf.shape(x)[1])
        rows = tf.gather(self.table, positions)  # (n | batch, n, d_model)
        return x + tf.cast(rows, x.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "max_len": self.max_len,
            "seed": self.seed,
        }


def _rope_angles(positions, n, head_dim, base):
    """Angles (n | batch, n, head_dim / 2) in float64."""
    if positions is None:
        positions = tf.range(n)
    i = tf.range(head_dim // 2, dtype=tf.float64)
    inv_freq = tf.constant(base, tf.float64) ** (-2.0 * i / head_dim)
    return tf.cast(positions, tf.float64)[..., None] * inv_freq


def apply_rope(x, positions=None, *, base=10000.0):
    """Rotary position embedding (Su et al., 2021), the "halves" pairing.

    x (..., n, head_dim), head_dim even; positions int (n,) or (batch, n)
    (batch = x.shape[0]), default 0 .. n-1. Feature i pairs with feature
    i + h (h = head_dim / 2); the pair turns by position * base^(-2i/head_dim):
    out[i] = x[i] cos - x[i + h] sin, out[i + h] = x[i] sin + x[i + h] cos.
    """
    x = tf.convert_to_tensor(x)
    if positions is not None:
        positions = tf.convert_to_tensor(positions)
    checks.rope_inputs(x, positions)
    head_dim, rank = x.shape[-1], len(x.shape)
    angles = _rope_angles(positions, tf.shape(x)[-2], head_dim, base)
    if len(angles.shape) == 3:  # (batch, n, h) -> (batch, 1, ..., 1, n, h)
        for _ in range(rank - 3):
            angles = angles[:, None]
    cos, sin = tf.cast(tf.cos(angles), x.dtype), tf.cast(tf.sin(angles), x.dtype)
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return tf.concat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _slopes(num_heads):
    """Press et al.'s rule (see attncourse.numpy.alibi_slopes)."""
    if num_heads & (num_heads - 1) == 0:  # a power of two
        return [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    low = 2 ** int(math.floor(math.log2(num_heads)))
    return _slopes(low) + _slopes(2 * low)[0::2][: num_heads - low]


def alibi_slopes(num_heads):
    """ALiBi slopes (num_heads,) float32 (Press et al., 2022): 2^(-8(h+1)/H)
    for a power of two H, else the paper's interleaving rule."""
    checks.check_positive("num_heads", num_heads)
    return tf.constant(_slopes(int(num_heads)), tf.float32)


def alibi_bias(num_heads, num_queries, num_keys=None):
    """The ALiBi bias (num_heads, num_queries, num_keys) float32, added to
    the scores: -slope_h * |p_i - j|, query i at p_i = num_keys -
    num_queries + i (bottom-right aligned). num_keys defaults to num_queries.
    """
    num_keys = num_queries if num_keys is None else num_keys
    checks.alibi_inputs(num_heads, num_queries, num_keys)
    query_pos = tf.range(num_keys - num_queries, num_keys)[:, None]
    distance = tf.abs(query_pos - tf.range(num_keys)[None, :])  # (n_q, n_k)
    slopes = alibi_slopes(num_heads)[:, None, None]
    return slopes * tf.cast(-distance, tf.float32)  # -0 stays 0
