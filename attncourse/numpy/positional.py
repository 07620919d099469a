"""Sinusoidal positional encoding (Vaswani et al., 2017) in NumPy.

    PE[p, 2i]     = sin(p / 10000^(2i / d_model)),
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model)).

Each pair of columns is a sine/cosine of one frequency; frequencies fall
geometrically from 1 to 1/10000 across the columns. For odd d_model the last
column is the sine of the next frequency, with no cosine partner.
"""

import numpy as np

from attncourse import checks

__all__ = ["PositionalEncoding", "sinusoidal_positional_encoding"]


def sinusoidal_positional_encoding(num_positions, d_model):
    """The table PE of shape (num_positions, d_model), float64."""
    checks.check_count("num_positions", num_positions)
    checks.check_positive("d_model", d_model)
    positions = np.arange(num_positions, dtype=np.float64)[:, None]
    even = np.arange(0, d_model, 2, dtype=np.float64)  # the 2i of each pair
    angles = positions / 10000.0 ** (even / d_model)  # (num_positions, ceil(d/2))
    pe = np.zeros((num_positions, d_model))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return pe


class PositionalEncoding:
    """Adds the sinusoidal table to inputs (batch, n, d_model), n <= max_len."""

    def __init__(self, d_model, max_len=1000):
        checks.check_positive("max_len", max_len)
        self.d_model, self.max_len = d_model, max_len
        self.table = sinusoidal_positional_encoding(max_len, d_model)

    def __call__(self, x):
        """x (batch, n, d_model) -> x + PE[:n], same shape."""
        x = np.asarray(x)
        checks.positional_input(x, self.d_model, self.max_len)
        return x + self.table[: x.shape[1]].astype(x.dtype, copy=False)
