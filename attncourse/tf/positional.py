"""Sinusoidal positional encoding (Vaswani et al., 2017) in TensorFlow.

    PE[p, 2i]     = sin(p / 10000^(2i / d_model)),
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model)).

The angles are computed in float64 and the table cast to float32: in float32
the angle p / 10000^(2i/d) of position 1000 is off by ~6e-5, and so is its sine.
For odd d_model the last column is a sine with no cosine partner.
"""

import keras
import tensorflow as tf

from attncourse import checks

__all__ = ["PositionalEncoding", "sinusoidal_positional_encoding"]


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
