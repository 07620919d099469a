"""Figures of the chapter "Tiled attention, forward and backward" (flash-attention).

Drawn by draw.py (``.venv/bin/python book/figures/draw.py flash-attention-tiles
flash-attention-backward``).
"""

from __future__ import annotations

from draw import (
    BLOCKED,
    FAINT,
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

N, B = 12, 3  # positions and block size of the drawn grids: 4 x 4 tiles
T = N // B
SKIPPED = "#EEEEEE"


def _tile_grid(c: Canvas, gx, gy, cell, shade) -> None:
    """The causal N x N score grid cut into T x T tiles, (gx, gy) its top-left.

    ``shade(qb, kb)`` gives the tint of a computed tile's cells. Tiles above the
    diagonal are drawn as skipped; inside a diagonal tile the cells above the
    diagonal are hatched as masked.
    """
    side = B * cell
    for qb in range(T):
        for kb in range(T):
            x0, top = gx + kb * side, gy - qb * side
            if kb > qb:
                c.rect(x0, top - side, side, side, fc=SKIPPED, ec=FAINT, lw=0.6)
                c.text(x0 + side / 2, top - side / 2, "skip", fs=8.0, color=FAINT)
                continue
            for a in range(B):
                for b in range(B):
                    i, j = qb * B + a, kb * B + b
                    masked = j > i
                    c.rect(
                        x0 + b * cell,
                        top - (a + 1) * cell,
                        cell,
                        cell,
                        fc=BLOCKED if masked else tint(WEIGHT, shade(qb, kb)),
                        ec="#FFFFFF",
                        lw=0.6,
                        hatch="////" if masked else None,
                    )
    for k in range(T + 1):  # tile borders
        c.line([gx + k * side] * 2, [gy - N * cell, gy], color=MUTED, lw=1.0)
        c.line([gx, gx + N * cell], [gy - k * side] * 2, color=MUTED, lw=1.0)


def _legend(c: Canvas, x, y) -> None:
    c.legend(
        x,
        y,
        [
            ("score computed", tint(WEIGHT, 0.45), None),
            ("masked inside a diagonal tile", BLOCKED, "////"),
            ("tile skipped (never computed)", SKIPPED, None),
        ],
        cell=1.5,
        gap=1.8,
    )


def flash_attention_tiles() -> Canvas:
    c = Canvas(h=5.6)
    c.title(2.5, 52.0, "Forward: tiles over queries and keys, causal")
    cell, gx, gy = 2.5, 9.5, 44.0
    side = B * cell
    qb, kb = 2, 2  # the query block being computed, its key block alive now

    def shade(i, j):
        if i != qb:
            return 0.22
        return 0.85 if j == kb else 0.5

    _tile_grid(c, gx, gy, cell, shade)
    row_top = gy - qb * side
    c.outline(gx + kb * side, row_top, side, side, color=INK, lw=2.2)
    # the query block on the left, key / value blocks on top
    c.rect(gx - 2.1, row_top - side, 1.3, side, fc=tint(QUERY, 0.7), ec=QUERY)
    c.text(gx - 2.6, row_top - side / 2, "$Q_i$", ha="right", color=QUERY)
    c.text(gx - 5.6, gy - N * cell / 2, "queries", rotation=90, fs=SMALL, color=MUTED)
    for j in range(T):
        live = j == kb
        x0 = gx + j * side
        c.rect(x0, gy + 0.7, side, 1.2, fc=tint(KEY, 0.75 if live else 0.2), ec=KEY)
        c.text(x0 + side / 2, gy + 3.2, f"$K_{j}, V_{j}$", fs=SMALL, color=KEY)
    c.note(gx + N * cell + 1.0, gy + 1.3, "keys", fs=SMALL)
    # the outputs of the query block: O_i and one logsumexp per query
    ox = gx + N * cell + 1.5
    c.rect(ox, row_top - side, 3.2, side, fc=tint(OUTPUT, 0.6), ec=OUTPUT)
    c.rect(ox + 3.8, row_top - side, 1.2, side, fc=tint(WEIGHT, 0.6), ec=WEIGHT)
    c.text(ox + 1.6, row_top + 1.0, "$O_i$", va="bottom", fs=SMALL, color=OUTPUT)
    c.text(ox + 4.4, row_top + 1.0, "$L_i$", va="bottom", fs=SMALL, color=WEIGHT)
    c.note(gx, gy - N * cell - 2.0, "n = 12, blocks of 3: 4 × 4 tiles", fs=8.6)
    c.note(
        gx,
        gy - N * cell - 4.0,
        "causal: 10 tiles computed, 6 skipped",
        fs=8.6,
        color=INK,
    )
    # the loop, beside it
    tx, y = 52.0, 45.5
    lines = [
        (0, r"for each query block $i$:"),
        (1, r"$m = -\infty,\ \ell = 0,\ U = 0$"),
        (1, r"for each key block $j \leq i$  (causal):"),
        (2, r"$S = Q_i K_j^{\top} / \sqrt{d}$"),
        (2, r"$m' = \max(m,\ \mathrm{rowmax}\ S)$"),
        (2, r"$P = e^{S - m'}$"),
        (2, r"$\ell \leftarrow e^{m - m'}\ell + \mathrm{rowsum}\ P$"),
        (2, r"$U \leftarrow e^{m - m'}U + P\, V_j$"),
        (2, r"$m \leftarrow m'$"),
        (1, r"$O_i = U / \ell$,   $L_i = m + \log \ell$"),
    ]
    for indent, s in lines:
        if s.startswith("$"):
            c.text(tx + 2.6 * indent, y, s, ha="left", fs=SMALL)
        else:
            c.note(tx + 2.6 * indent, y, s, color=INK)
        y -= 3.1
    c.note(tx, y - 0.6, "alive at once: one tile of scores", color=MUTED)
    c.note(tx, y - 2.6, "and the running m, ℓ, U of one block", color=MUTED)
    c.note(tx, y - 4.6, "diagonal tile: mask the cells with j > i", color=MUTED)
    _legend(c, 2.5, 6.5)
    return c


def flash_attention_backward() -> Canvas:
    c = Canvas(h=4.8)
    c.title(2.5, 44.0, "Backward: rebuild each tile's weights from L, never store them")
    cell, gx, gy = 2.1, 7.5, 35.0
    side = B * cell
    qb, kb = 2, 1  # the query block walked now, and its tile (qb, kb)

    def shade(i, j):
        if i != qb:
            return 0.18
        return 0.85 if j == kb else 0.45

    _tile_grid(c, gx, gy, cell, shade)
    c.outline(gx, gy - qb * side, side * (qb + 1), side, color=INK, lw=2.0)
    c.outline(gx + kb * side, gy - qb * side, side, side, color=INK, lw=1.2)
    c.text(gx - 0.6, gy - (qb + 0.5) * side, "$i$", ha="right", fs=SMALL)
    for j in range(T):
        live = j == kb
        c.rect(
            gx + j * side,
            gy + 0.7,
            side,
            1.2,
            fc=tint(KEY, 0.75 if live else 0.2),
            ec=KEY,
        )
    c.text(gx + (kb + 0.5) * side, gy + 3.3, "$K_j, V_j$", fs=SMALL, color=KEY)
    c.note(gx, gy - N * cell - 2.0, "query block i: key blocks", fs=8.6, color=INK)
    c.note(gx, gy - N * cell - 3.9, "j ≤ i stream past, as forward", fs=8.6, color=INK)
    # the per-tile dataflow
    x_in, x_mid, x_out = 40.5, 58.0, 78.0
    c.note(x_in, 38.5, "inputs and saved", fs=SMALL, ha="center")
    c.note(x_mid, 38.5, "rebuilt for tile (i, j)", fs=SMALL, ha="center")
    c.note(x_out, 38.5, "accumulated", fs=SMALL, ha="center")
    inputs = [
        (r"$Q_i,\ K_j,\ V_j$", KEY),
        (r"$L_i$  (logsumexp)", WEIGHT),
        (r"$dO_i$", OUTPUT),
        (r"$D_i = \mathrm{rowsum}(dO_i \circ O_i)$", OUTPUT),
    ]
    for n, (s, col) in enumerate(inputs):
        y = 33.5 - 5.0 * n
        c.box(x_in, y, 15.0 if n < 3 else 17.5, 3.2, s, color=col, fs=SMALL)
    steps = [
        r"$S = Q_i K_j^{\top} / \sqrt{d}$",
        r"$P = e^{S - L_i}$",
        r"$dP = dO_i\, V_j^{\top}$",
        r"$dS = P \circ (dP - D_i)$",
    ]
    for n, s in enumerate(steps):
        y = 33.5 - 5.0 * n
        c.box(x_mid, y, 15.5, 3.2, s, color=WEIGHT, fill=0.1, fs=SMALL)
        if n:
            c.arrow((x_mid, y + 3.4), (x_mid, y + 1.7), color=MUTED, lw=0.9)
    c.arrow((x_in + 7.6, 33.5), (x_mid - 7.9, 33.5), color=MUTED, lw=0.9)
    c.arrow((x_in + 7.6, 28.5), (x_mid - 7.9, 28.5), color=MUTED, lw=0.9)
    c.arrow((x_in + 7.6, 23.5), (x_mid - 7.9, 23.5), color=MUTED, lw=0.9)
    c.arrow((x_in + 8.9, 18.5), (x_mid - 7.9, 18.5), color=MUTED, lw=0.9)
    outs = [
        (r"$dV_j {+}{=} P^{\top} dO_i$", VALUE, 28.5),
        (r"$dK_j {+}{=} dS^{\top} Q_i / \sqrt{d}$", KEY, 18.5),
        (r"$dQ_i {+}{=} dS\, K_j / \sqrt{d}$", QUERY, 13.5),
    ]
    for s, col, y in outs:
        c.box(x_out, y, 16.5, 3.2, s, color=col, fs=SMALL)
    c.arrow((x_mid + 7.8, 28.5), (x_out - 8.3, 28.5), color=MUTED, lw=0.9)
    c.arrow((x_mid + 7.8, 18.5), (x_out - 8.3, 18.5), color=MUTED, lw=0.9)
    c.arrow((x_mid + 7.8, 18.0), (x_out - 8.3, 13.5), color=MUTED, lw=0.9)
    c.note(
        x_in - 5.0,
        7.5,
        "saved by the forward: O and L, one number per query (b, nq)",
        color=INK,
    )
    c.note(
        x_in - 5.0,
        5.2,
        "never saved: the (nq, nk) weights P; each tile is rebuilt, used, dropped",
        color=INK,
    )
    c.note(x_in - 5.0, 2.9, "skipped tiles (j > i) are skipped here too", fs=8.6)
    return c


FIGURES = {
    "flash-attention-tiles": flash_attention_tiles,
    "flash-attention-backward": flash_attention_backward,
}
