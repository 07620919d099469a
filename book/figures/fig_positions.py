"""Figures of the chapter "Where am I? Positions" (positions).

Drawn by draw.py (``.venv/bin/python book/figures/draw.py rope-rotation``).
"""

from __future__ import annotations

import numpy as np
from draw import (
    BLOCKED,
    HEADS,
    INK,
    MUTED,
    QUERY,
    WEIGHT,
    Canvas,
    tint,
)


def _pair_strip(c: Canvas, x0: float, y: float, cell: float, d: int) -> None:
    """The head_dim features of one query; feature i pairs with i + d/2."""
    h = d // 2
    colors = [[tint(HEADS[j % h], 0.55) for j in range(d)]]
    c.grid(x0, y, colors, cell, texts=[[f"{j}" for j in range(d)]], fs=9.0)
    for i in range(h):  # an arc above the strip joins the two halves' features
        xa, xb = x0 + (i + 0.5) * cell, x0 + (i + h + 0.5) * cell
        c.arrow(
            (xa, y + 0.3),
            (xb, y + 0.3),
            color=HEADS[i],
            rad=-0.28 - 0.02 * i,
            head=False,
            lw=1.1,
        )
    c.note(x0 + d * cell + 0.8, y - cell / 2, "features of q", fs=9.0)


def _rotation_dial(c, cx, cy, r, theta, color, label, positions):
    """A pair's plane: the vector (q_i, q_{i+h}) at four positions."""
    ts = np.linspace(0, 2 * np.pi, 121)
    c.line(cx + r * np.cos(ts), cy + r * np.sin(ts), color=tint(MUTED, 0.4), lw=0.8)
    c.line([cx - r - 0.8, cx + r + 0.8], [cy, cy], color=tint(MUTED, 0.4), lw=0.6)
    c.line([cx, cx], [cy - r - 0.8, cy + r + 0.8], color=tint(MUTED, 0.4), lw=0.6)
    start = 0.35
    for k, m in enumerate(positions):
        a = start + m * theta
        tip = (cx + r * np.cos(a), cy + r * np.sin(a))
        c.arrow((cx, cy), tip, color=tint(color, 0.35 + 0.65 * (k + 1) / 4), lw=1.5)
        c.text(
            cx + (r + 1.4) * np.cos(a),
            cy + (r + 1.4) * np.sin(a),
            f"m={m}",
            fs=8.6,
            color=MUTED,
        )
    c.text(cx, cy - r - 2.6, label, fs=9.0, color=INK)


def _alibi_grid(c, x0, top, cell, slope, n, *, numbers):
    """The causal ALiBi bias -slope * (i - j) of one head; blocked above."""
    vmax = 0.25 * (n - 1)  # the steepest head's largest penalty
    colors, hatches, texts = [], [], []
    for i in range(n):
        row_c, row_h, row_t = [], [], []
        for j in range(n):
            if j > i:
                row_c.append(BLOCKED)
                row_h.append("////")
                row_t.append("")
            else:
                v = slope * (i - j)
                row_c.append(tint(WEIGHT, 0.08 + 0.8 * v / vmax))
                row_h.append(None)
                row_t.append(f"{-v:g}" if numbers and v else ("0" if numbers else ""))
        colors.append(row_c)
        hatches.append(row_h)
        texts.append(row_t)
    c.grid(x0, top, colors, cell, hatches=hatches, texts=texts, fs=8.0, lw=1.0)


def rope_rotation() -> Canvas:
    c = Canvas(h=5.0, y0=2.0)
    c.title(2.5, 49.0, "RoPE: turn feature pairs by position")
    c.title(50.0, 49.0, "ALiBi: a fixed bias per head")
    # RoPE: the halves pairing, then two pairs' planes
    d, cell = 8, 2.3
    _pair_strip(c, 3.0, 41.5, cell, d)
    c.note(3.0, 36.6, "halves: feature i pairs with i + d/2 (d = 8)", fs=9.0)
    _rotation_dial(
        c,
        11.0,
        23.0,
        6.0,
        1.0,
        HEADS[0],
        r"pair (0, 4): $\theta_0 = 1$",
        range(4),
    )
    _rotation_dial(
        c,
        32.0,
        23.0,
        6.0,
        0.1,
        HEADS[1],
        r"pair (1, 5): $\theta_1 = 0.1$",
        range(0, 25, 8),
    )
    c.note(
        3.0,
        8.6,
        r"at position m each pair turns by $m\,\theta_i$, "
        r"$\theta_i = 10000^{-2i/d}$;",
        fs=9.0,
        color=INK,
    )
    c.note(
        3.0,
        6.2,
        r"$q_m \cdot k_n$ then sees the angle $(n - m)\,\theta_i$ only",
        fs=9.0,
        color=QUERY,
    )
    # ALiBi: four heads' biases over a causal 5 x 5 score matrix
    n, cell = 5, 2.9
    slopes = [2.0 ** (-8 * (h + 1) / 4) for h in range(4)]
    for h, slope in enumerate(slopes):
        x0 = 52.0 + (h % 2) * 18.5
        top = 45.0 - (h // 2) * 17.5
        _alibi_grid(c, x0, top, cell, slope, n, numbers=h == 0)
        c.note(
            x0 + n * cell / 2,
            top - n * cell - 1.4,
            f"head {h + 1}: slope 1/{round(1 / slope)}",
            ha="center",
            fs=9.0,
            color=INK,
        )
    c.note(
        50.0,
        8.6,
        "score + bias, bias = -slope (i - j): older keys cost",
        fs=9.0,
        color=INK,
    )
    c.note(
        50.0,
        6.2,
        "more, steeply in head 1, hardly in head 4 (rows: queries)",
        fs=9.0,
        color=INK,
    )
    return c


FIGURES = {"rope-rotation": rope_rotation}
