"""Positions in PyTorch: sinusoidal, learned, RoPE, ALiBi.

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

import torch
from torch import nn

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
    positions = torch.arange(int(num_positions), dtype=torch.float64)[:, None]
    even = torch.arange(0, int(d_model), 2, dtype=torch.float64)  # 2i of each pair
    angles = positions / 10000.0 ** (even / d_model)  # (num_positions, ceil(d/2))
    pe = torch.zeros(int(num_positions), int(d_model), dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.float()


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to inputs (batch, n, d_model), n <= max_len.

    The table is a non-persistent buffer: it moves with ``.to(device)`` but
    is not saved in the state_dict (it is recomputed).
    """

    def __init__(self, d_model, max_len=1000):
        super().__init__()
        checks.check_positive("max_len", max_len)
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer(
            "table", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )

    def forward(self, x):
        """x (batch, n, d_model) -> x + PE[:n], same shape."""
        x = torch.as_tensor(x)
        checks.positional_input(x, self.d_model, self.max_len)
        return x + self.table[: x.shape[1]].to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned table: x (batch, n, d_model) -> x + table[positions].

    The nn.Parameter ``table`` has max_len rows (normal, std 0.02); positions
    default to 0 .. n-1 and may be given as (n,) or (batch, n).
    """

    def __init__(self, d_model, max_len, seed=None):
        super().__init__()
        checks.check_positive("d_model", d_model)
        checks.check_positive("max_len", max_len)
        generator = None
        if seed is not None:
            checks.check_count("seed", seed)
            generator = torch.Generator().manual_seed(int(seed))
        self.d_model, self.max_len = d_model, max_len
        table = torch.randn(max_len, d_model, generator=generator)
        self.table = nn.Parameter(0.02 * table)

    def forward(self, x, positions=None):
        """x (batch, n, d_model) -> same shape."""
        x = torch.as_tensor(x)
        if positions is not None:
            positions = torch.as_tensor(positions)
            checks.learned_positions_inputs(
                x, positions.detach().cpu(), self.d_model, self.max_len
            )
        else:
            checks.learned_positions_inputs(x, None, self.d_model, self.max_len)
            positions = torch.arange(x.shape[1])
        rows = self.table[positions.to(self.table.device)]  # (n | batch, n, d)
        return x + rows.to(x.dtype)


def _rope_angles(positions, n, head_dim, base, device):
    """Angles (n | batch, n, head_dim / 2) in float64."""
    if positions is None:
        positions = torch.arange(n, device=device)
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    inv_freq = base ** (-2.0 * i / head_dim)
    return positions.to(device, torch.float64)[..., None] * inv_freq


def apply_rope(x, positions=None, *, base=10000.0):
    """Rotary position embedding (Su et al., 2021), the "halves" pairing.

    x (..., n, head_dim), head_dim even; positions int (n,) or (batch, n)
    (batch = x.shape[0]), default 0 .. n-1. Feature i pairs with feature
    i + h (h = head_dim / 2); the pair turns by position * base^(-2i/head_dim):
    out[i] = x[i] cos - x[i + h] sin, out[i + h] = x[i] sin + x[i + h] cos.
    """
    x = torch.as_tensor(x)
    if positions is not None:
        positions = torch.as_tensor(positions)
    checks.rope_inputs(x, positions)
    n, head_dim = x.shape[-2:]
    angles = _rope_angles(positions, n, head_dim, base, x.device)
    if angles.dim() == 3:  # (batch, n, h) -> (batch, 1, ..., 1, n, h)
        angles = angles.reshape((-1,) + (1,) * (x.dim() - 3) + angles.shape[1:])
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


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
    return torch.tensor(_slopes(int(num_heads)), dtype=torch.float32)


def alibi_bias(num_heads, num_queries, num_keys=None):
    """The ALiBi bias (num_heads, num_queries, num_keys) float32, added to
    the scores: -slope_h * |p_i - j|, query i at p_i = num_keys -
    num_queries + i (bottom-right aligned). num_keys defaults to num_queries.
    """
    num_keys = num_queries if num_keys is None else num_keys
    checks.alibi_inputs(num_heads, num_queries, num_keys)
    query_pos = torch.arange(num_keys - num_queries, num_keys)[:, None]
    distance = (query_pos - torch.arange(num_keys)[None, :]).abs()  # (n_q, n_k)
    return alibi_slopes(num_heads)[:, None, None] * (-distance).float()
