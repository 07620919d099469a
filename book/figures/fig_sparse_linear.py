"""Figures of the chapter "Local and linear attention" (sparse-linear-attention).

Drawn by draw.py (``.venv/bin/python book/figures/draw.py sliding-window-band
linear-attention-state``).
"""

from __future__ import annotations

import numpy as np
from draw import (
    ATTEND,
    BLOCKED,
    FAINT,
    FS,
    INK,
    KEY,
    MUTED,
    OUTPUT,
    QUERY,
    SMALL,
    VALUE,
    WEIGHT,
    Canvas,
    tint,
)

N, W = 8, 3  # sequence length and window of the drawings


def _mask_panel(c: Canvas, x0: float, top: float, cell: float) -> None:
    """The causal sliding-window mask in the n x n grid, the band outlined."""
    i, j = np.arange(N)[:, None], np.arange(N)[None]
    band = (i - j >= 0) & (i - j < W)
    colors = [[ATTEND if a else BLOCKED for a in row] for row in band]
    hatches = [[None if a else "////" for a in row] for row in band]
    c.grid(x0, top, colors, cell, hatches=hatches, ec="#FFFFFF", lw=1.2)
    for k in range(N):
        c.text(
            x0 - 0.5, top - (k + 0.5) * cell, str(k), fs=8.6, ha="right", color=MUTED
        )
        c.text(
            x0 + (k + 0.5) * cell, top + 0.5, str(k), fs=8.6, va="bottom", color=MUTED
        )
    c.note(x0 + N * cell / 2, top + 2.6, "key j", ha="center", fs=8.6)
    c.text(x0 - 3.0, top - N * cell / 2, "query i", fs=8.6, rotation=90, color=MUTED)
    c.note(x0, top - N * cell - 1.6, f"n² = {N * N} cells,", fs=8.6, color=INK)
    c.note(x0, top - N * cell - 3.5, f"{int(band.sum())} of them used", fs=8.6)


def _band_panel(c: Canvas, x0: float, top: float, cell: float) -> None:
    """The same weights stored as an (n, w) band: column c is key i - w + 1 + c."""
    keys = np.arange(N)[:, None] - W + 1 + np.arange(W)[None]
    real = keys >= 0
    colors = [[tint(KEY, 0.45) if r else BLOCKED for r in row] for row in real]
    hatches = [[None if r else "////" for r in row] for row in real]
    texts = [[str(k) if k >= 0 else "" for k in row] for row in keys]
    c.grid(x0, top, colors, cell, hatches=hatches, texts=texts, fs=8.6, lw=1.2)
    for k in range(N):
        c.text(
            x0 - 0.5, top - (k + 0.5) * cell, str(k), fs=8.6, ha="right", color=MUTED
        )
    for col in range(W):
        c.text(x0 + (col + 0.5) * cell, top + 0.5, str(col), fs=8.6, va="bottom")
    c.note(x0 + W * cell / 2, top + 2.6, "slot c", ha="center", fs=8.6)
    c.note(x0 - 1.0, top - N * cell - 1.6, f"n · w = {N * W} cells", fs=8.6, color=INK)
    c.note(x0 - 1.0, top - N * cell - 3.5, "cell: key i - w + 1 + c", fs=8.6)


def _receptive_field(c: Canvas, x0: float, y0: float) -> None:
    """Tokens in three rows (input, layer 1, layer 2): what the last one sees."""
    n, dx, dy = 8, 2.4, 9.0
    last = n - 1
    seen = {2: {last}}
    seen[1] = {p for q in seen[2] for p in range(q - W + 1, q + 1)}
    seen[0] = {p for q in seen[1] for p in range(q - W + 1, q + 1)}
    names = ["input", "layer 1", "layer 2"]
    for level in range(3):
        y = y0 + level * dy
        c.note(x0 - 1.2, y, names[level], ha="right", color=INK, fs=8.6)
        for p in range(n):
            on = p in seen[level]
            x = x0 + p * dx
            c.circle(
                x,
                y,
                0.95,
                color=OUTPUT if level == 2 and on else (KEY if on else FAINT),
                fill=0.55 if on else 0.05,
            )
            if level < 2 and on:
                for q in seen[level + 1]:
                    if 0 <= q - p < W:
                        c.line(
                            [x, x0 + q * dx],
                            [y + 1.0, y + dy - 1.0],
                            color=tint(KEY, 0.7),
                            lw=0.9,
                            zorder=1,
                        )
    c.note(
        x0 + last * dx + 1.6, y0 + 2 * dy, f"w = {W}", fs=8.6, color=INK, va="center"
    )
    for level, count in [(1, W), (0, 2 * W - 1)]:
        c.note(
            x0 + last * dx + 1.6,
            y0 + level * dy,
            f"{count} tokens",
            fs=8.6,
            color=KEY,
        )


def sliding_window_band() -> Canvas:
    c = Canvas(h=5.0)
    c.title(2.5, 46.5, "Sliding-window attention: a band in the grid, stored as a band")
    cell = 2.5
    _mask_panel(c, 7.0, 38.0, cell)
    c.arrow(
        (29.5, 28.0),
        (36.0, 28.0),
        color=MUTED,
        lw=1.0,
        label="keep only",
        below="the band",
        fs=8.6,
    )
    _band_panel(c, 39.5, 38.0, cell)
    c.line([51.5, 51.5], [3.0, 43.0], color="#DDDDDD", lw=0.9)
    c.title(54.0, 41.0, "Receptive field", fs=FS)
    _receptive_field(c, 61.5, 12.5)
    c.note(54.0, 6.0, "each layer reaches w - 1 tokens further back:", fs=8.6)
    c.note(54.0, 3.9, "after L layers, L(w - 1) + 1 tokens", fs=8.6, color=INK)
    c.legend(
        2.5,
        3.2,
        [("in the window", ATTEND, None), ("not computed", BLOCKED, "////")],
        cell=1.4,
    )
    return c


def _matrix(c, x0, top, rows, cols, color, label, *, amount=0.45, cell=1.0):
    """A plain (rows x cols) rectangle standing for a matrix, label below."""
    c.rect(
        x0,
        top - rows * cell,
        cols * cell,
        rows * cell,
        fc=tint(color, amount),
        ec=color,
        lw=1.0,
    )
    c.text(x0 + cols * cell / 2, top - rows * cell - 1.4, label, fs=8.6, va="top")
    return x0 + cols * cell


def _associativity(c: Canvas, y: float) -> None:
    """(phi(Q) phi(K)^T) V  versus  phi(Q) (phi(K)^T V), drawn to scale."""
    n, d = 8, 3
    top = y + n / 2
    x = _matrix(c, 4.0, top, n, d, QUERY, r"$\phi(Q)$")
    x = _matrix(c, x + 1.0, y + d / 2, d, n, KEY, r"$\phi(K)^\top$")
    c.text(x + 1.5, y, "=", fs=FS)
    x = _matrix(c, x + 3.0, top, n, n, WEIGHT, r"$n \times n$", amount=0.3)
    c.text(x + 1.2, y, "·", fs=FS)
    _matrix(c, x + 2.4, top, n, d, VALUE, "$V$")
    c.note(
        4.0, top + 2.0, "first φ(Q) φ(K)ᵀ: an n × n table, O(n² d)", fs=8.6, color=INK
    )
    x0 = 47.0
    x = _matrix(c, x0, y + d / 2, d, n, KEY, r"$\phi(K)^\top$")
    x = _matrix(c, x + 1.0, top, n, d, VALUE, "$V$")
    c.text(x + 1.5, y, "=", fs=FS)
    x = _matrix(c, x + 3.0, y + d / 2, d, d, OUTPUT, "$S$", amount=0.6)
    c.text(x + 2.5, y, ";", fs=FS)
    x = _matrix(c, x + 5.0, top, n, d, QUERY, r"$\phi(Q)$")
    c.text(x + 1.2, y, "·", fs=FS)
    _matrix(c, x + 2.4, y + d / 2, d, d, OUTPUT, "$S$", amount=0.6)
    c.note(
        x0,
        top + 2.0,
        "first S = φ(K)ᵀ V: d × d_v numbers, O(n d d_v)",
        fs=8.6,
        color=INK,
    )


def _recurrence(c: Canvas, y: float) -> None:
    """Four steps: write phi(k_t) v_t^T into S, read it with phi(q_t)."""
    xs = [14.0 + 14.5 * t for t in range(4)]
    c.note(
        2.5,
        y + 11.5,
        "causal: one token at a time, write then read",
        color=INK,
        fs=SMALL,
    )
    for t, x in enumerate(xs):
        c.box(x - 3.0, y + 8.0, 4.4, 2.4, f"$k_{t + 1}$", color=KEY, fs=SMALL)
        c.box(x + 2.4, y + 8.0, 4.4, 2.4, f"$v_{t + 1}$", color=VALUE, fs=SMALL)
        c.arrow((x - 3.0, y + 6.8), (x - 0.6, y + 2.4), color=KEY, lw=1.0)
        c.arrow((x + 2.4, y + 6.8), (x + 0.6, y + 2.4), color=VALUE, lw=1.0)
        state = [[tint(OUTPUT, 0.25 + 0.12 * t)] * 3] * 3
        c.grid(x - 1.5, y + 2.0, state, 1.0, lw=0.8)
        c.text(x + 2.2, y + 3.4, f"$S_{t + 1}, z_{t + 1}$", fs=8.6, ha="left")
        c.box(x - 7.5, y - 5.0, 3.6, 2.4, f"$q_{t + 1}$", color=QUERY, fs=SMALL)
        c.arrow((x - 5.6, y - 4.0), (x - 1.7, y - 0.6), color=QUERY, lw=1.0)
        c.arrow((x, y - 1.2), (x, y - 4.0), color=OUTPUT, lw=1.0)
        c.box(x, y - 5.4, 3.6, 2.4, f"$o_{t + 1}$", color=OUTPUT, fs=SMALL)
        if t:
            c.arrow(
                (xs[t - 1] + 1.8, y + 0.5),
                (x - 1.8, y + 0.5),
                color=MUTED,
                lw=1.0,
                below="carry",
                fs=8.0,
                offset=0.5,
            )
    c.text(
        66.5,
        y + 5.0,
        r"$S_t = S_{t-1} + \phi(k_t)\, v_t^\top$",
        ha="left",
        fs=SMALL,
    )
    c.text(66.5, y + 1.2, r"$z_t = z_{t-1} + \phi(k_t)$", ha="left", fs=SMALL)
    c.text(
        66.5,
        y - 2.8,
        r"$o_t = \dfrac{S_t^\top \phi(q_t)}{z_t^\top \phi(q_t)}$",
        ha="left",
        fs=SMALL,
    )
    c.note(
        2.5,
        y - 9.8,
        "The state has d × d_v numbers at every step, however long the sequence:"
        " the fixed-size memory, now read by a trained query.",
        color=INK,
        fs=8.6,
    )


def linear_attention_state() -> Canvas:
    c = Canvas(h=5.6)
    c.title(2.5, 52.5, "Linear attention: reorder the product, keep a running state")
    _associativity(c, 38.0)
    c.line([2.5, c.W - 2.5], [27.0, 27.0], color="#DDDDDD", lw=0.9)
    _recurrence(c, 13.0)
    return c


FIGURES = {
    "sliding-window-band": sliding_window_band,
    "linear-attention-state": linear_attention_state,
}
