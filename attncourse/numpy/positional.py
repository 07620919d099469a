"""Positions in NumPy (float64 reference): sinusoidal, learned, RoPE, ALiBi.

Sinusoidal (Vaswani et al., 2017):

    PE[p, 2i]     = sin(p / 10000^(2i / d_model)),
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model)).

Each pair of columns is a sine/cosine of one frequency; frequencies fall
geometrically from 1 (the first pair) to 10000^-((d_model - 2) / d_model) for
the last pair (even d_model): above 1/10000, which they approach as d_model
grows but never reach (d_model = 16 ends at 10000^-0.875, about 3.2e-4).
For odd d_model the last column is the sine of the next frequency, with no
cosine partner.

Learned absolute positions: a trained table of max_len rows, row p added to
the input at position p. RoPE (Su et al., 2021) rotates pairs of query/key
features by angles proportional to the position; ALiBi (Press et al., 2022)
adds -slope_h * distance to the attention scores of head h.
"""

import math

import numpy as np

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


class LearnedPositionalEmbedding:
    """Adds a learned table: x (batch, n, d_model) -> x + table[positions].

    ``params["table"]`` has max_len rows (normal, std 0.02, from ``seed``);
    positions default to 0 .. n-1 and may be given as (n,) or (batch, n).
    """

    def __init__(self, d_model, max_len, seed=None):
        checks.check_positive("d_model", d_model)
        checks.check_positive("max_len", max_len)
        if seed is not None:
            checks.check_count("seed", seed)
        self.d_model, self.max_len = d_model, max_len
        rng = np.random if seed is None else np.random.default_rng(seed)
        self.params = {"table": 0.02 * rng.standard_normal((max_len, d_model))}

    def __call__(self, x, positions=None):
        """x (batch, n, d_model) -> same shape."""
        x = np.asarray(x)
        positions = None if positions is None else np.asarray(positions)
        checks.learned_positions_inputs(x, positions, self.d_model, self.max_len)
        if positions is None:
            positions = np.arange(x.shape[1])
        table = self.params["table"].astype(x.dtype, copy=False)
        return x + table[np.asarray(positions)]  # (n | batch, n, d_model)


def _rope_angles(positions, n, head_dim, base):
    """Angles (n | batch, n, head_dim / 2): position * base^(-2i / head_dim)."""
    if positions is None:
        positions = np.arange(n)
    i = np.arange(head_dim // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / head_dim)  # (head_dim / 2,)
    return np.asarray(positions, dtype=np.float64)[..., None] * inv_freq


def apply_rope(x, positions=None, *, base=10000.0):
    """Rotary position embedding (Su et al., 2021), the "halves" pairing.

    x (..., n, head_dim), head_dim even; positions int (n,) or (batch, n)
    (batch = x.shape[0]), default 0 .. n-1. Feature i pairs with feature
    i + head_dim/2, and the pair is rotated by angle position * theta_i,
    theta_i = base^(-2i / head_dim):

        out[i]        = x[i] cos - x[i + h] sin,
        out[i + h]    = x[i] sin + x[i + h] cos,     h = head_dim / 2.

    Apply it to queries and keys (not values): q_m . k_n then depends on the
    positions only through m - n. Returns an array of x's shape and dtype.
    """
    x = np.asarray(x)
    positions = None if positions is None else np.asarray(positions)
    checks.rope_inputs(x, positions)
    n, head_dim = x.shape[-2:]
    angles = _rope_angles(positions, n, head_dim, base)  # (.., n, h)
    if angles.ndim == 3:  # (batch, n, h) -> (batch, 1, ..., 1, n, h)
        angles = angles.reshape((-1,) + (1,) * (x.ndim - 3) + angles.shape[1:])
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _slopes(num_heads):
    """Press et al.'s rule as a list: geometric for a power of two, else the
    closest lower power of two plus every other slope of the next one."""
    if num_heads & (num_heads - 1) == 0:  # a power of two
        return [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    low = 2 ** int(math.floor(math.log2(num_heads)))
    return _slopes(low) + _slopes(2 * low)[0::2][: num_heads - low]


def alibi_slopes(num_heads):
    """ALiBi slopes (num_heads,) (Press et al., 2022).

    For a power of two: 2^(-8 (h + 1) / num_heads), h = 0 .. num_heads-1
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the closest
    lower power of two, then every other slope of the next power of two.
    """
    checks.check_positive("num_heads", num_heads)
    return np.array(_slopes(int(num_heads)))


def alibi_bias(num_heads, num_queries, num_keys=None):
    """The ALiBi bias (num_heads, num_queries, num_keys), added to the scores.

    bias[h, i, j] = -slope_h * |p_i - j|, with the queries bottom-right
    aligned: query i sits at position p_i = num_keys - num_queries + i (the
    last num_queries positions, as in cached decoding). num_keys defaults to
    num_queries. Combine with a causal mask for a decoder.
    """
    num_keys = num_queries if num_keys is None else num_keys
    checks.alibi_inputs(num_heads, num_queries, num_keys)
    query_pos = np.arange(num_keys - num_queries, num_keys)[:, None]
    distance = np.abs(query_pos - np.arange(num_keys)[None, :])  # (n_q, n_k)
    return alibi_slopes(num_heads)[:, None, None] * -distance  # -0 stays 0
