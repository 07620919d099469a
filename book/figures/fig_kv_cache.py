"""Figures of the chapter "Generating text: KV cache, MQA and GQA" (kv-cache).

Drawn by draw.py (``.venv/bin/python book/figures/draw.py kv-cache-gqa``).
"""

from __future__ import annotations

import numpy as np
from draw import (
    ATTEND,
    BLOCKED,
    FS,
    INK,
    KEY,
    MUTED,
    QUERY,
    SMALL,
    VALUE,
    Canvas,
    mask_grid,
    tint,
)


def _staircase(c: Canvas, x0: float, top: float, cell: float, steps: int) -> None:
    """Row s: the cache after step s (keys 0..s-1), the newest key outlined."""
    for s in range(1, steps + 1):
        y = top - (s - 1) * (cell + 0.5)
        colors = [[tint(KEY, 0.35)] * (s - 1) + [tint(KEY, 0.85)]]
        c.grid(x0, y, colors, cell, ec="#FFFFFF", lw=1.2)
        c.outline(x0 + (s - 1) * cell, y, cell, cell, color=KEY, lw=1.6)
        c.text(
            x0 - 0.8,
            y - cell / 2,
            f"step {s}: $q_{s - 1}$",
            fs=SMALL,
            ha="right",
            color=QUERY,
        )
        c.note(x0 + s * cell + 0.8, y - cell / 2, f"t = {s}", fs=8.6)
    for j in range(steps):
        c.text(
            x0 + (j + 0.5) * cell,
            top + 0.5,
            f"{j}",
            fs=8.6,
            va="bottom",
            color=MUTED,
        )


def _chunk_masks(c: Canvas, x0: float, top: float, cell: float) -> None:
    """3 new queries over 6 keys: bottom-right (right) and top-left (wrong)."""
    nq, nk = 3, 6
    j, i = np.arange(nk)[None], np.arange(nq)[:, None]
    right = j <= i + (nk - nq)
    wrong = j <= i
    rows, cols = ["3", "4", "5"], [str(k) for k in range(nk)]
    colors = [MUTED] * 3 + [INK] * 3
    for n, (allowed, label, ok) in enumerate(
        [(right, "bottom-right", True), (wrong, "top-left", False)]
    ):
        x = x0 + n * (nk * cell + 5.0)
        mask_grid(c, x, top, allowed, cell, rows=rows, cols=cols, col_colors=colors)
        c.note(
            x + nk * cell / 2,
            top - nq * cell - 1.3,
            label + (": correct" if ok else ": wrong"),
            ha="center",
            color=INK if ok else QUERY,
            fs=SMALL,
        )
        if not ok:  # keys the new queries should see, hidden
            for a, b in zip(*np.nonzero(right & ~wrong), strict=True):
                c.outline(x + b * cell, top - a * cell, cell, cell, color=QUERY, lw=1.6)
    c.note(x0 + 1.5 * cell, top + 2.6, "cached", ha="center", fs=8.6)
    c.note(x0 + 4.5 * cell, top + 2.6, "new", ha="center", fs=8.6)


def _groups(c, x0, y, num_kv, *, width=36.0, label="", per_token=""):
    """8 query heads over num_kv key/value heads, each kv head under its group."""
    H, w, gap = 8, 3.4, (width - 8 * 3.4) / 7
    xs = [x0 + w / 2 + h * (w + gap) for h in range(H)]
    for h, x in enumerate(xs):
        c.box(x, y, w, 2.2, f"$q_{h}$", color=QUERY, fs=SMALL)
    group = H // num_kv
    for g in range(num_kv):
        members = xs[g * group : (g + 1) * group]
        left, right = members[0] - w / 2, members[-1] + w / 2
        cx = (left + right) / 2
        c.box(cx, y - 5.2, right - left, 2.2, "", color=KEY, fill=0.3)
        if group == 1:
            c.text(cx, y - 5.2, f"$k_{g} v_{g}$", fs=8.6)
        else:
            c.text(cx - (right - left) / 4, y - 5.2, f"$k_{g}$", fs=SMALL)
            c.text(cx + (right - left) / 4, y - 5.2, f"$v_{g}$", fs=SMALL, color=VALUE)
        for x in members:
            c.line(
                [x, x if group == 1 else cx + (x - cx) * 0.5],
                [y - 1.1, y - 4.1],
                color=MUTED,
                lw=0.9,
            )
    c.title(x0, y + 2.6, label, fs=FS)
    c.note(x0 + width, y + 2.6, per_token, ha="right", color=INK, fs=SMALL)


def kv_cache_gqa() -> Canvas:
    c = Canvas(h=6.0)
    cell = 2.6
    c.title(2.5, 56.0, "Decoding with a KV cache")
    c.note(2.5, 52.6, "one new query per step attends to every cached key", fs=SMALL)
    _staircase(c, 14.0, 48.5, cell, 5)
    c.note(
        14.0 + 2.5 * cell, 31.2, "keys (and values) in the cache", ha="center", fs=8.6
    )
    c.title(2.5, 27.0, "A chunk of 3 new tokens (positions 3-5)", fs=FS)
    _chunk_masks(
        c,
        5.0,
        19.5,
        2.2,
    )
    c.legend(
        2.5, 7.0, [("may attend", ATTEND, None), ("blocked", BLOCKED, "////")], cell=1.4
    )
    c.note(
        2.5,
        3.4,
        "red outline: keys the top-left mask wrongly hides",
        color=QUERY,
        fs=8.6,
    )

    x0 = 49.0
    c.line([46.5, 46.5], [3.0, 56.0], color="#DDDDDD", lw=0.9)
    c.title(x0, 56.0, "Query heads share key/value heads")
    c.note(
        x0,
        52.6,
        r"cache per token and layer: $2 \cdot G \cdot d_{\mathrm{head}}$ numbers",
        fs=SMALL,
    )
    _groups(c, x0, 44.0, 8, label="MHA: G = 8", per_token=r"$16\,d_{\mathrm{head}}$")
    _groups(c, x0, 29.5, 2, label="GQA: G = 2", per_token=r"$4\,d_{\mathrm{head}}$")
    _groups(c, x0, 15.0, 1, label="MQA: G = 1", per_token=r"$2\,d_{\mathrm{head}}$")
    c.note(
        x0,
        3.2,
        "query head h reads kv head h // (H / G); H = 8 here",
        color=INK,
        fs=SMALL,
    )
    return c


FIGURES = {"kv-cache-gqa": kv_cache_gqa}
