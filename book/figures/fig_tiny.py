"""Figures of the chapter "A tiny model that learns" (tiny-transformer).

Drawn by draw.py (``.venv/bin/python book/figures/draw.py induction-heads``).
"""

from __future__ import annotations

from draw import HEADS, INK, MUTED, OUTPUT, Canvas, tint

TOKENS = ["C", "A", "B", "D", "E", "A"]
PREV, IND = HEADS[0], HEADS[3]


def induction_heads() -> Canvas:
    c = Canvas(h=3.6)
    c.title(
        2.5, 33.0, "Two heads compose: a previous-token head, then an induction head"
    )
    xs = [23.0 + 9.0 * k for k in range(len(TOKENS))]
    y_tok, y_mid, w, h = 7.0, 19.0, 6.4, 4.4
    c.note(2.5, y_tok, "tokens (position)", color=INK)
    c.note(2.5, y_mid + 0.9, "after layer 1:", color=INK)
    c.note(2.5, y_mid - 1.6, "token + previous", color=MUTED)
    for k, (x, token) in enumerate(zip(xs, TOKENS, strict=True)):
        key = k == 2
        c.box(x, y_tok, w, h, f"{token}  ({k})", fill=0.12, color=INK, fs=10.5)
        if k == 0:
            c.box(x, y_mid, w, h, "C", fill=0.05, color=MUTED, fs=10.0)
            continue
        c.box(
            x,
            y_mid,
            w,
            h,
            f"{token} | {TOKENS[k - 1]}",
            color=PREV if key else tint(PREV, 0.6),
            fill=0.25 if key else 0.08,
            fs=10.0,
            lw=2.0 if key else 1.0,
        )
        c.arrow(
            (xs[k - 1] + 1.0, y_tok + h / 2),
            (x - 1.0, y_mid - h / 2),
            color=PREV if key else tint(PREV, 0.45),
            lw=1.8 if key else 0.9,
        )
    c.note(2.5, 13.6, "layer 1 head:", color=PREV, fs=9.0)
    c.note(2.5, 11.6, "attends to i - 1", color=PREV, fs=9.0)
    # layer 2: the query at the second A finds the key marked "previous = A"
    q, k = xs[5], xs[2]
    c.arrow((q, y_mid + h / 2), (k, y_mid + h / 2 + 0.2), color=IND, lw=2.2, rad=0.32)
    c.note(
        (q + k) / 2,
        28.4,
        "layer 2 head: the query A attends to the key whose previous token is A",
        ha="center",
        color=IND,
        fs=9.0,
    )
    c.box(83.0, y_mid, 6.0, h, "B", color=OUTPUT, fill=0.3, fs=11.0, lw=1.6)
    c.arrow((q + w / 2 + 0.3, y_mid), (80.0 - 0.3, y_mid), color=OUTPUT, lw=1.6)
    c.note(83.0, y_mid - 4.2, "copies B:", ha="center", color=OUTPUT, fs=9.0)
    c.note(83.0, y_mid - 6.4, "next token", ha="center", color=OUTPUT, fs=9.0)
    c.note(
        2.5,
        1.9,
        "A B ... A -> B. Induction score of a head: its weight "
        "on the token after an earlier copy of the query's token.",
        color=MUTED,
        fs=9.0,
    )
    return c


FIGURES = {"induction-heads": induction_heads}
