"""Sinusoidal positional encoding (Vaswani et al., 2017) in PyTorch.

    PE[p, 2i]     = sin(p / 10000^(2i / d_model)),
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model)).

The angles are computed in float64 and the table cast to float32: in float32
the angle p / 10000^(2i/d) of position 1000 is off by ~6e-5, and so is its sine.
For odd d_model the last column is a sine with no cosine partner.
"""

import torch
from torch import nn

from attncourse import checks

__all__ = ["PositionalEncoding", "sinusoidal_positional_encoding"]


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
