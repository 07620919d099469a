"""Figures of the chapter "Attention as a GPU kernel" (attention-kernel).

Drawn by draw.py (``.venv/bin/python book/figures/draw.py attention-kernel-grid``).
"""

from __future__ import annotations

from draw import (
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

BLOCKS, HEADS = 4, 3  # query blocks and (batch, head) rows of the drawn grid
PROGRAM = (2, 1)  # the program shown inside: query block 2 of row 1


def attention_kernel_grid() -> Canvas:
    c = Canvas(h=4.9)
    c.title(2.5, 46.0, "One program per block of queries; the tile loop inside it")
    # left: the grid of programs
    gx, gy, w, h = 6.0, 38.0, 6.0, 6.0
    c.note(gx, gy + 2.6, "grid = (query blocks, batch × heads)", color=INK)
    for i in range(BLOCKS):
        for b in range(HEADS):
            live = (i, b) == PROGRAM
            c.box(
                gx + w * b + w / 2,
                gy - h * i - h / 2,
                w - 0.5,
                h - 0.5,
                f"({i}, {b})",
                color=QUERY,
                fill=0.7 if live else 0.12,
                fs=SMALL,
                lw=2.0 if live else 0.8,
            )
    c.note(gx, gy - h * BLOCKS - 2.2, "program_id(0): query block i", fs=8.6)
    c.note(gx, gy - h * BLOCKS - 4.2, "program_id(1): batch · head row", fs=8.6)
    c.note(gx, gy - h * BLOCKS - 6.2, "all run in parallel, independent", fs=8.6)
    # right: inside one program, HBM on the left, on-chip memory on the right
    hx, sx = 36.0, 60.0
    c.note(hx - 3.5, 40.5, "GPU memory (HBM): large, slow", color=INK)
    c.note(sx - 3.0, 40.5, "on chip (SRAM, registers): small, fast", color=INK)
    c.panel(sx - 3.5, 4.5, 86.0, 38.5, color=WEIGHT, fill=0.05)
    hbm = [
        (r"$Q$  (bh, $n_q$, d)", QUERY, 34.0),
        (r"$K$  (bh, $n_k$, d)", KEY, 27.0),
        (r"$V$  (bh, $n_k$, $d_v$)", VALUE, 20.0),
        (r"$O$, $L$  outputs", OUTPUT, 9.0),
    ]
    for s, col, y in hbm:
        c.box(hx + 5.5, y, 14.0, 4.0, s, color=col, fill=0.2, fs=SMALL)
    sram = [
        (r"$Q_i$  (BLOCK_Q, d): loaded once", QUERY, 34.0),
        (r"$K_j$, $V_j$: one key block per step", KEY, 25.0),
        (r"$S$, $P$  (BLOCK_Q, BLOCK_K)", WEIGHT, 18.0),
        (r"$m$, $\ell$, $U$: float32 accumulators", OUTPUT, 11.0),
    ]
    for s, col, y in sram:
        c.box(sx + 12.8, y, 26.5, 4.0, s, color=col, fill=0.12, fs=SMALL)
    c.arrow((hx + 12.7, 34.0), (sx - 0.6, 34.0), color=QUERY, lw=1.2)
    c.arrow((hx + 12.7, 27.0), (sx - 0.6, 25.6), color=KEY, lw=1.2)
    c.arrow((hx + 12.7, 20.0), (sx - 0.6, 24.4), color=VALUE, lw=1.2)
    c.arrow((sx - 0.6, 11.0), (hx + 12.7, 9.0), color=OUTPUT, lw=1.2)
    c.note(hx + 13.0, 36.0, "tl.load", fs=8.6)
    c.note(hx + 13.0, 14.0, "tl.store, once", fs=8.6)
    c.note(sx + 0.5, 29.4, "for j in range(0, stop, BLOCK_K):", fs=8.6, color=INK)
    c.note(sx + 0.5, 21.4, "tl.dot → tl.exp → tl.dot", fs=8.6)
    c.note(sx + 0.5, 6.6, "the n × n scores never leave the chip", fs=8.6, color=INK)
    c.rect(hx + 5.0, 2.0, 1.0, 1.0, fc=tint(QUERY, 0.7), ec=QUERY)
    c.note(hx + 6.8, 2.5, "program (2, 1), drawn on the right", fs=8.6)
    c.note(2.5, 2.5, "causal: stop ends at the block's diagonal", fs=8.6, color=MUTED)
    return c


FIGURES = {"attention-kernel-grid": attention_kernel_grid}
