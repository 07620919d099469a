"""Diagrams of the chapter "The Transformer block" (book/transformer-block.md)."""

from draw import BLUE, GREEN, INK, ORANGE, PURPLE, SMALL, Canvas

STREAM = BLUE  # the residual stream
ATTN, FFN, NORM = ORANGE, GREEN, PURPLE


def _add(c, x, y):
    """The residual addition: a circled plus on the stream."""
    c.circle(x, y, 1.5, "+", color=STREAM, fill=0.0, fs=13)


def _norm_box(c, x, y, label, *, dashed=False):
    c.box(x, y, 9.0, 3.4, label, color=NORM, fill=0.22, dashed=dashed)


def _branch(c, sx, bx, y_from, y_to, boxes):
    """A sublayer branch: leave the stream at y_from, run up through ``boxes``
    [(label, colour, kind, y)], come back into the + at y_to."""
    y_first = boxes[0][3]
    c.line([sx, bx], [y_from, y_from], color=INK, lw=1.1)
    c.arrow((bx, y_from), (bx, y_first - 1.8), lw=1.1)
    for i, (label, color, kind, y) in enumerate(boxes):
        if kind == "norm":
            _norm_box(c, bx, y, label)
        else:
            c.box(bx, y, 12.0, 3.6, label, color=color, fill=0.25)
        if i + 1 < len(boxes):
            c.arrow((bx, y + 1.8), (bx, boxes[i + 1][3] - 1.8), lw=1.1)
    y_last = boxes[-1][3]
    c.line([bx, bx], [y_last + 1.8, y_to], color=INK, lw=1.1)
    c.arrow((bx, y_to), (sx + 1.6, y_to), lw=1.1)


def _stream(c, sx, y0, y1):
    c.line([sx, sx], [y0, y1], color=STREAM, lw=3.0, zorder=1)


def transformer_block() -> Canvas:
    c = Canvas(h=6.4)
    for p, ox in enumerate((1.5, 45.0)):
        c.panel(ox, 1.5, ox + 41.5, 62.5)
        sx, bx = ox + 11.0, ox + 28.0
        if p == 0:
            c.title(ox + 1.5, 59.5, "Post-LN (Vaswani et al. 2017)")
            c.note(ox + 1.5, 56.6, "norm after each addition: ON the stream", color=INK)
        else:
            c.title(ox + 1.5, 59.5, "Pre-LN (Xiong et al. 2020)")
            c.note(
                ox + 1.5, 56.6, "norm inside each branch: stream untouched", color=INK
            )
        # post-LN: y leaves LN2; pre-LN: y is the stream itself, and the final
        # LN (once per stack, not part of a block) sits above it, dashed
        y_out = 51.5 if p == 0 else 46.0
        c.box(sx, 6.5, 7.0, 3.4, "$x$", color=INK, fill=0.06)
        c.box(sx, y_out, 7.0, 3.4, "$y$", color=INK, fill=0.06)
        _stream(c, sx, 8.2, y_out - 1.7)
        c.arrow((sx, y_out - 4.0), (sx, y_out - 1.7), color=STREAM, lw=1.4)
        if p == 0:
            _branch(c, sx, bx, 11.0, 21.0, [("MHA", ATTN, "sub", 16.0)])
            _add(c, sx, 21.0)
            _norm_box(c, sx, 26.5, "LN$_1$")
            _branch(c, sx, bx, 31.0, 41.0, [("FFN", FFN, "sub", 36.0)])
            _add(c, sx, 41.0)
            _norm_box(c, sx, 46.0, "LN$_2$")
            c.note(
                ox + 1.5,
                3.8,
                "every path from x to y passes LN$_1$ and LN$_2$",
                fs=SMALL,
            )
        else:
            _branch(
                c,
                sx,
                bx,
                10.5,
                24.0,
                [("LN$_1$", NORM, "norm", 14.0), ("MHA", ATTN, "sub", 19.5)],
            )
            _add(c, sx, 24.0)
            _branch(
                c,
                sx,
                bx,
                28.0,
                41.5,
                [("LN$_2$", NORM, "norm", 31.5), ("FFN", FFN, "sub", 37.0)],
            )
            _add(c, sx, 41.5)
            c.arrow((sx, 47.7), (sx, 49.8), color=INK, lw=1.1, dashed=True)
            _norm_box(c, sx, 51.5, "final LN", dashed=True)
            c.note(sx + 5.2, 52.3, "once, after the last", fs=8.6)
            c.note(sx + 5.2, 50.6, "block: not part of $y$", fs=8.6)
            c.note(
                ox + 1.5,
                3.8,
                "stream = x + branch outputs: an identity path from x",
                fs=SMALL,
            )
        c.note(sx - 1.0, 33.5, "residual", ha="right", color=STREAM, fs=8.6)
        c.note(sx - 1.0, 31.8, "stream", ha="right", color=STREAM, fs=8.6)
    return c


FIGURES = {"transformer-block": transformer_block}
