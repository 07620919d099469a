"""Draw the course's schematic diagrams into book/figures/<name>.svg.

Run ``.venv/bin/python book/figures/draw.py`` to rewrite every SVG (or name some:
``draw.py soft-vs-hard``; ``--out DIR`` writes elsewhere, ``--png DIR`` also writes
PNG previews). The output is byte-identical from run to run (fixed hash salt, no
date or other metadata), so tests/book/test_figures.py can check that the
committed files are what this code draws.

Conventions, shared by every figure through the helpers below:

* text is drawn as paths (``svg.fonttype = "path"``): the SVG needs no font, and the
  Chinese of the running example (欢迎 来 北京) shows on every system. Latin text is
  DejaVu Sans (bundled with Matplotlib), Chinese the Simplified Chinese face of Noto
  Sans CJK from the pinned PyPI package ``noto-cjk-sans-otc`` (subset here to the
  few characters used), maths Matplotlib's Computer Modern mathtext;
* one palette (Okabe and Ito's colour-blind-safe colours): queries vermillion, keys
  blue, values green, weights purple, outputs orange; "blocked" is grey and hatched
  so it reads without colour;
* every figure sits on an opaque, light, rounded card. An SVG shown by ``<img>``
  cannot follow the site's dark mode, so the card keeps it readable there:
  pydata-sphinx-theme puts content images on a white background and dims them a
  little (``brightness(.8) contrast(1.2)``) in dark mode, and the card makes the
  figure independent of that CSS (and readable in any other viewer).

The Chinese edition has its own copies, drawn by the same code with the labels of
``labels_zh.py``: ``draw.py --language zh`` writes book/figures/zh/<name>.svg. With
``LANGUAGE = "zh"`` every string that ``Canvas.text`` draws with Latin letters outside
``$…$`` is replaced by its entry in ``LABELS``; a string missing there makes
``draw()`` fail, naming it and its figure.
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("svg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import font_manager, patheffects  # noqa: E402
from matplotlib.offsetbox import AnnotationBbox, HPacker, TextArea  # noqa: E402
from matplotlib.patches import (  # noqa: E402
    Circle,
    FancyArrowPatch,
    FancyBboxPatch,
    Rectangle,
)
from matplotlib.textpath import TextPath  # noqa: E402

HERE = Path(__file__).resolve().parent
SALT = "attention-course-figures"
LANGUAGES = ("en", "zh")
LANGUAGE = "en"  # set by draw(); "zh" draws the labels of labels_zh.py
_FIGURE = ""  # the figure being drawn, for the report of missing labels
_MISSING: dict[str, list[str]] = {}  # figure -> zh labels missing from LABELS
_USED: set[str] = set()  # the LABELS keys looked up since draw() began
CJK_FAMILY = "Noto Sans CJK SC"
SC_FACE = 2  # Noto Sans CJK SC inside the collection (as in book/_ext/cjk_webfont.py)

# Okabe & Ito (2008), colour-blind safe
VERMILLION, BLUE, GREEN = "#D55E00", "#0072B2", "#009E73"
PURPLE, ORANGE, SKY, YELLOW = "#CC79A7", "#E69F00", "#56B4E9", "#F0E442"
INK, MUTED, FAINT = "#1B1B1B", "#555555", "#9A9A9A"
CARD, CARD_EDGE = "#FFFFFF", "#C9CED6"
QUERY, KEY, VALUE, WEIGHT, OUTPUT = VERMILLION, BLUE, GREEN, PURPLE, ORANGE
ATTEND, BLOCKED = SKY, "#D9D9D9"
HEADS = (BLUE, ORANGE, GREEN, PURPLE)

FS = 11.0  # the one body font size (pt); SMALL for notes, BIG for panel titles
SMALL, BIG = 9.5, 12.0
WIDTH = 8.8  # inches: 634 pt, about 845 px before the page scales it


def tint(color: str, amount: float) -> tuple[float, float, float]:
    """``color`` mixed with white: amount 0 is white, 1 the colour itself."""
    rgb = np.array(matplotlib.colors.to_rgb(color))
    return tuple(1 - amount * (1 - rgb))


# --------------------------------------------------------------------------
# fonts


CJK = r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"  # with full-width punctuation


def cjk_characters() -> str:
    """Every CJK character in this file and labels_zh.py (so the subset covers
    every figure in both languages)."""
    files = [Path(__file__), HERE / "labels_zh.py"]
    text = "".join(f.read_text(encoding="utf-8") for f in files)
    return "".join(sorted(set(re.findall(CJK, text))))


def register_cjk_font(folder: Path) -> None:
    """Subset Noto Sans CJK SC to the characters used and register it with
    Matplotlib (its FT2Font opens only the first face of a .ttc collection, which is
    the Japanese one).

    Matplotlib's SVG text-to-path layout looks a glyph's font up by its glyph id
    alone, so a CJK glyph whose id is also that of a DejaVu glyph drawn after it
    lends that glyph its advance (a subset renumbered from 1 widened the spaces of
    "a noisy 北京" to 1 em). The subset therefore keeps Noto's own glyph ids
    (``retain_gids``): CJK ideographs sit far above DejaVu Sans's ~6,000 glyphs."""
    import noto_cjk_sans_otc
    from fontTools import subset
    from fontTools.ttLib import TTFont

    font = TTFont(str(noto_cjk_sans_otc.FONT_PATH), fontNumber=SC_FACE, lazy=True)
    options = subset.Options()
    options.retain_gids = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=cjk_characters())
    subsetter.subset(font)
    path = folder / "cjk-sc-subset.otf"
    font.save(str(path))
    manager = font_manager.fontManager  # forget a subset of an earlier draw()
    manager.ttflist = [f for f in manager.ttflist if f.name != CJK_FAMILY]
    manager.addfont(str(path))


def style() -> None:
    plt.rcParams.update(
        {
            "svg.fonttype": "path",
            "svg.hashsalt": SALT,
            "font.family": ["DejaVu Sans", CJK_FAMILY],
            "font.size": FS,
            "mathtext.fontset": "cm",
            "hatch.linewidth": 0.8,
            "hatch.color": "#7A7A7A",
            "path.simplify": False,
        }
    )


# --------------------------------------------------------------------------
# the vocabulary: a canvas in tenths of an inch, boxes, arrows, grids, labels


class Canvas:
    """A figure ``w`` x ``h`` inches with data units of 0.1 inch (y up), on an
    opaque rounded card."""

    def __init__(self, h: float, w: float = WIDTH, y0: float = 0.0):
        self.fig = plt.figure(figsize=(w, h))
        self.fig.patch.set_alpha(0)
        ax = self.fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, w * 10)
        ax.set_ylim(y0, y0 + h * 10)
        ax.set_aspect("equal")
        ax.axis("off")
        self.ax = ax
        self.W, self.H = w * 10, h * 10
        ax.add_patch(
            FancyBboxPatch(
                (0.25, y0 + 0.25),
                self.W - 0.5,
                self.H - 0.5,
                boxstyle="round,pad=0,rounding_size=1.4",
                fc=CARD,
                ec=CARD_EDGE,
                lw=0.9,
                zorder=-10,
            )
        )

    # -- text
    def text(self, x, y, s, *, fs=FS, ha="center", va="center", color=INK, **kw):
        if LANGUAGE == "zh":
            s = translate(s)
            if re.search(CJK, without_math(s)):
                return self.zh_text(x, y, s, fs=fs, ha=ha, va=va, color=color, **kw)
        if s.startswith("$") and s.endswith("$"):
            fs *= 1.1  # Computer Modern looks smaller than DejaVu Sans
        return self.ax.text(x, y, s, fontsize=fs, ha=ha, va=va, color=color, **kw)

    def zh_text(self, x, y, s, *, fs, ha, va, color, zorder=3, **kw):
        """Text with Chinese in it. The CJK font has no bold face: bold CJK gets a
        thin outline of its colour. Mathtext sets the text around maths in one
        font, which has no CJK; so a string with maths, or bold with other letters
        than CJK, is drawn as runs (of maths, of CJK, of the rest) packed on one
        baseline."""
        if isinstance(kw.get("family"), str):  # e.g. DejaVu Sans Mono: add CJK
            kw["family"] = [kw["family"], CJK_FAMILY]
        bold = kw.get("weight") == "bold"
        # one path filled and stroked (withStroke would write the outline twice)
        outline = [
            patheffects.PathPatchEffect(
                facecolor=color, edgecolor=color, linewidth=0.04 * fs, joinstyle="round"
            )
        ]
        split = r"(\$[^$]*\$" + (f"|{CJK}+)" if bold else ")")
        runs = [run for run in re.split(split, s) if run]
        props = {"fontsize": fs, "color": color, **kw}

        def cjk(run: str) -> bool:
            return bold and re.fullmatch(f"{CJK}+", run) is not None

        if len(runs) == 1:
            if cjk(s):
                props["path_effects"] = outline
            return self.ax.text(x, y, s, ha=ha, va=va, zorder=zorder, **props)
        if set(kw) - {"weight", "family"} or "\n" in s:
            raise ValueError(f"cannot draw {s!r} with {sorted(kw)} as runs")
        children = []
        for run in runs:
            textprops = {**props, "path_effects": outline} if cjk(run) else props
            children.append(TextArea(run, textprops=textprops))
        box = AnnotationBbox(
            HPacker(children=children, align="baseline", pad=0, sep=0),
            (x, y),
            box_alignment=(
                {"left": 0.0, "center": 0.5, "right": 1.0}[ha],
                {"bottom": 0.0, "center": 0.5, "top": 1.0}[va],
            ),
            frameon=False,
            pad=0,
            annotation_clip=False,
            zorder=zorder,
        )
        self.ax.add_artist(box)
        return box

    def title(self, x, y, s, *, ha="left", fs=BIG, **kw):
        return self.text(x, y, s, fs=fs, ha=ha, weight="bold", **kw)

    def note(self, x, y, s, *, ha="left", color=MUTED, fs=SMALL, **kw):
        return self.text(x, y, s, fs=fs, ha=ha, color=color, **kw)

    # -- shapes
    def box(
        self,
        x,
        y,
        w,
        h,
        s="",
        *,
        color=INK,
        fill=0.18,
        fs=FS,
        lw=1.2,
        radius=0.6,
        dashed=False,
        text_color=INK,
        hatch=None,
        zorder=2,
        **kw,
    ):
        """A rounded box centred on (x, y); ``fill`` is the tint of ``color``."""
        patch = FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle=f"round,pad=0,rounding_size={radius}",
            fc=tint(color, fill) if fill else CARD,
            ec=color,
            lw=lw,
            ls=(0, (3, 2)) if dashed else "-",
            hatch=hatch,
            zorder=zorder,
        )
        self.ax.add_patch(patch)
        if s:
            self.text(x, y, s, fs=fs, color=text_color, zorder=zorder + 1, **kw)
        return patch

    def panel(self, x0, y0, x1, y1, *, color=CARD_EDGE, fill=0.0, lw=0.9):
        """A background panel from (x0, y0) to (x1, y1), behind everything."""
        return self.box(
            (x0 + x1) / 2,
            (y0 + y1) / 2,
            x1 - x0,
            y1 - y0,
            color=color,
            fill=fill,
            lw=lw,
            radius=1.2,
            zorder=-5,
        )

    def circle(self, x, y, r, s="", *, color=INK, fill=0.15, fs=FS):
        self.ax.add_patch(
            Circle((x, y), r, fc=tint(color, fill), ec=color, lw=1.2, zorder=2)
        )
        if s:
            self.text(x, y, s, fs=fs, zorder=3)

    def rect(self, x0, y0, w, h, *, fc, ec="none", lw=0.8, hatch=None, zorder=1):
        """A plain rectangle with its lower-left corner at (x0, y0)."""
        self.ax.add_patch(
            Rectangle((x0, y0), w, h, fc=fc, ec=ec, lw=lw, hatch=hatch, zorder=zorder)
        )

    def arrow(
        self,
        p0,
        p1,
        *,
        color=INK,
        lw=1.2,
        label=None,
        below=None,
        fs=SMALL,
        offset=1.0,
        rad=0.0,
        dashed=False,
        head=True,
        zorder=3,
        label_color=None,
    ):
        """An arrow p0 -> p1; ``label`` above its middle, ``below`` under it."""
        patch = FancyArrowPatch(
            p0,
            p1,
            arrowstyle="-|>" if head else "-",
            mutation_scale=11 + 2 * lw,
            color=color,
            lw=lw,
            ls=(0, (3, 2)) if dashed else "-",
            connectionstyle=f"arc3,rad={rad}",
            shrinkA=0,
            shrinkB=0,
            zorder=zorder,
        )
        self.ax.add_patch(patch)
        mx, my = (p0[0] + p1[0]) / 2, (p0[1] + p1[1]) / 2
        tc = label_color or MUTED
        if label:
            self.text(mx, my + offset, label, fs=fs, va="bottom", color=tc)
        if below:
            self.text(mx, my - offset, below, fs=fs, va="top", color=tc)
        return patch

    def line(self, xs, ys, *, color=INK, lw=1.2, dashed=False, zorder=2):
        self.ax.plot(
            xs,
            ys,
            color=color,
            lw=lw,
            ls=(0, (3, 2)) if dashed else "-",
            zorder=zorder,
            solid_capstyle="butt",
        )

    def grid(
        self,
        x0,
        y0,
        colors: Sequence[Sequence],
        cell: float,
        *,
        texts: Sequence[Sequence[str]] | None = None,
        hatches: Sequence[Sequence] | None = None,
        fs=SMALL,
        ec="#FFFFFF",
        lw=1.0,
        text_colors: Sequence[Sequence[str]] | None = None,
    ) -> Callable[[int, int], tuple[float, float]]:
        """A matrix of cells; (x0, y0) is the top-left corner, row 0 on top.
        Returns ``centre(i, j)``."""
        for i, row in enumerate(colors):
            for j, fc in enumerate(row):
                self.rect(
                    x0 + j * cell,
                    y0 - (i + 1) * cell,
                    cell,
                    cell,
                    fc=fc,
                    ec=ec,
                    lw=lw,
                    hatch=hatches[i][j] if hatches else None,
                )
                if texts and texts[i][j]:
                    tc = text_colors[i][j] if text_colors else INK
                    self.text(
                        x0 + (j + 0.5) * cell,
                        y0 - (i + 0.5) * cell,
                        texts[i][j],
                        fs=fs,
                        color=tc,
                        zorder=4,
                    )
        return lambda i, j: (x0 + (j + 0.5) * cell, y0 - (i + 0.5) * cell)

    def outline(self, x0, y0, w, h, *, color=INK, lw=2.0, zorder=5):
        """An unfilled rectangle, (x0, y0) its top-left corner."""
        self.rect(x0, y0 - h, w, h, fc="none", ec=color, lw=lw, zorder=zorder)

    def bars(
        self,
        x0,
        y0,
        weights,
        *,
        width,
        height,
        gap=0.6,
        color=WEIGHT,
        labels=None,
        values=True,
        fs=SMALL,
        hatched=(),
    ):
        """Vertical bars with their bases on y0; the largest weight 1 has
        ``height``. Returns the bars' centre x."""
        xs = []
        for i, w in enumerate(weights):
            x = x0 + i * (width + gap)
            if i in hatched:
                self.rect(x, y0, width, 0.35 * height, fc=BLOCKED, hatch="////")
            else:
                self.rect(x, y0, width, max(w, 0.004) * height, fc=tint(color, 0.75))
            xs.append(x + width / 2)
            if values and i not in hatched:
                self.text(
                    x + width / 2,
                    y0 + w * height + 0.3,
                    f"{w:.2f}",
                    fs=fs - 1,
                    va="bottom",
                    color=MUTED,
                )
            if labels:
                self.text(x + width / 2, y0 - 0.4, labels[i], fs=fs, va="top")
        self.line([x0 - 0.3, xs[-1] + width / 2 + 0.3], [y0, y0], color=MUTED, lw=0.8)
        return xs

    def legend(self, x, y, items, *, cell=1.6, gap=2.0):
        """Swatches with labels in a row from (x, y): items (label, fc, hatch)."""
        for label, fc, hatch in items:
            self.rect(x, y - cell / 2, cell, cell, fc=fc, ec=MUTED, lw=0.6, hatch=hatch)
            t = self.note(x + cell + 0.6, y, label, color=INK)
            x += cell + 0.6 + text_width(t) + gap
        return x


def without_math(s: str) -> str:
    return re.sub(r"\$[^$]*\$", "", s)


def needs_translation(s: str) -> bool:
    """Whether ``s`` has Latin letters outside ``$…$`` maths."""
    return bool(re.search(r"[A-Za-z]", without_math(s)))


def translate(s: str) -> str:
    """The Chinese label for ``s`` (``s`` itself when it needs none). A label
    missing from labels_zh.LABELS is drawn as it is and noted for draw() to report."""
    if not needs_translation(s):
        return s
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from labels_zh import LABELS

    if s not in LABELS:
        missing = _MISSING.setdefault(_FIGURE, [])
        if s not in missing:
            missing.append(s)
        return s
    _USED.add(s)
    return LABELS[s]


def text_width(artist) -> float:
    """Width of a text artist in canvas units (tenths of an inch)."""
    path = TextPath(
        (0, 0),
        artist.get_text(),
        size=artist.get_fontsize(),
        prop=artist.get_fontproperties(),
    )
    return path.get_extents().width / 72 * 10


def softmax(x) -> np.ndarray:
    x = np.asarray(x, float)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------
# 1. addressing


def addressing_qkv() -> Canvas:
    c = Canvas(h=5.4)
    keys_zh = ["欢迎", "来", "北京", "上海"]
    values_en = ["welcome", "to", "Beijing", "Shanghai"]
    scores = np.array([-0.6, 0.3, 3.0, 1.3])
    alpha = softmax(scores)
    rows = [42.0, 37.0, 32.0, 27.0]
    xq, xk, xs, xb, xv, xsum, xo = 6.5, 21.0, 34.0, 42.0, 63.5, 74.5, 82.5

    c.title(2.5, 51, "Soft addressing: attention reads every slot, weighted")
    for x, s in [
        (xk, r"keys $\mathbf{k}_i$"),
        (xs, r"scores $s_i$"),
        (xb + 5.5, r"weights $\alpha_i$"),
        (xv, r"values $\mathbf{v}_i$"),
    ]:
        c.text(x, 46.8, s, color=MUTED)
    c.note(xk - 6, 24.1, "memory: 4 (key, value) slots", color=MUTED)
    for y in rows:  # slot bands behind key and value
        c.box(
            (xk + xv) / 2,
            y,
            xv - xk + 12.5,
            4.2,
            color="#E8EBF0",
            fill=1.0,
            lw=0,
            zorder=0,
        )
    c.box(xq, rows[1] - 2.5, 9, 4.2, r"$\mathbf{q}$", color=QUERY, fs=14)
    c.note(xq, rows[1] - 6.2, "a noisy 北京", ha="center")
    for i, y in enumerate(rows):
        c.box(xk, y, 10, 3.4, color=KEY)
        c.text(xk - 2.6, y, rf"$\mathbf{{k}}_{i + 1}$")
        c.text(xk + 1.8, y, keys_zh[i])
        c.arrow((xq + 4.5, rows[1] - 2.5), (xk - 5.2, y), color=QUERY, lw=1.0)
        c.arrow((xk + 5.2, y), (xs - 2.8, y), color=MUTED, lw=0.9)
        c.text(xs, y, f"{scores[i]:+.1f}")
        c.arrow((xs + 2.8, y), (xb - 0.6, y), color=MUTED, lw=0.9)
        c.rect(xb, y - 1.2, 10 * alpha[i], 2.4, fc=tint(WEIGHT, 0.8))
        c.text(xb + 10 * alpha[i] + 0.5, y, f"{alpha[i]:.2f}", ha="left", fs=SMALL)
        c.text(xv - 7.6, y, "×", color=WEIGHT, fs=BIG)
        c.box(xv, y, 12, 3.4, color=VALUE)
        c.text(xv - 3.8, y, rf"$\mathbf{{v}}_{i + 1}$")
        c.text(xv + 1.4, y, values_en[i], fs=SMALL)
        c.arrow(
            (xv + 6.2, y),
            (xsum - 1.8, rows[1] - 2.5),
            color=WEIGHT,
            lw=0.6 + 4 * alpha[i],
        )
    c.circle(xsum, rows[1] - 2.5, 1.8, r"$\Sigma$", color=OUTPUT)
    c.arrow((xsum + 1.8, rows[1] - 2.5), (xo - 4.2, rows[1] - 2.5), color=OUTPUT)
    c.box(xo, rows[1] - 2.5, 8.4, 4.2, r"$\mathbf{o}$", color=OUTPUT, fs=14)
    c.note(xo, rows[1] - 6.2, "≈ Beijing", ha="center")
    c.text(
        xo - 1.0, rows[1] - 9.0, r"$\mathbf{o}=\Sigma_i\, \alpha_i \mathbf{v}_i$", fs=12
    )
    for x, s in [
        (xs, "1  score each key"),
        (xb + 5.5, "2  softmax"),
        (xsum - 2, "3  weighted sum"),
    ]:
        c.note(x, 22.5, s, ha="center", color=INK, weight="bold")

    c.line([2.5, c.W - 2.5], [19.6, 19.6], color=CARD_EDGE, lw=0.9)
    c.title(2.5, 16.6, "Hard addressing: a Python dict reads one slot")
    y = 9.5
    c.box(xq, y, 9, 4.2, "'北京'", color=QUERY)
    c.arrow((xq + 4.5, y), (xk - 6.8, y), color=QUERY, lw=1.0)
    c.text(xk + 1.0, y + 1.1, "key == query ?", fs=SMALL, color=MUTED)
    c.text(xk + 1.0, y - 1.4, "no  no  yes  no", fs=SMALL)
    c.arrow((xk + 8.2, y), (xb - 0.6, y), color=MUTED, lw=0.9)
    cell = 2.6
    hard = [[tint(WEIGHT, 0.8) if j == 2 else CARD for j in range(4)]]
    c.grid(xb, y + cell / 2, hard, cell, ec=MUTED, lw=0.8, texts=[["0", "0", "1", "0"]])
    c.note(xb + 2 * cell, y - 2.6, "one-hot weights", ha="center")
    c.arrow((xb + 4 * cell + 0.6, y), (xv - 6.2, y), color=WEIGHT, lw=1.6)
    c.box(xv, y, 12, 3.4, color=VALUE)
    c.text(xv - 3.8, y, r"$\mathbf{v}_3$")
    c.text(xv + 1.4, y, "Beijing", fs=SMALL)
    c.arrow((xv + 6.2, y), (xo - 4.2, y), color=OUTPUT)
    c.box(xo, y, 8.4, 3.4, "Beijing", color=OUTPUT, fs=SMALL)
    c.note(
        2.5,
        4.0,
        "A query equal to no key finds nothing (KeyError), and no "
        "gradient says which key was close,",
    )
    c.note(
        2.5,
        2.1,
        "so hard addressing cannot be learned by gradient descent; "
        "soft addressing can.",
    )
    return c


# --------------------------------------------------------------------------
# 2. the three steps


def scoring_three_steps() -> Canvas:
    c = Canvas(h=4.7)
    top, bottom = 37.0, 9.5
    mid = (top + bottom) / 2
    # inputs on top of step 1, values below step 3, the output on top of step 3
    c.box(8, 43.0, 5.5, 3.4, r"$\mathbf{q}$", color=QUERY, fs=13)
    c.box(23, 43.0, 15, 3.4, r"$\mathbf{k}_1, \dots, \mathbf{k}_n$", color=KEY, fs=12)
    for x in (8, 23):
        c.arrow((x, 41.3), (x, top + 0.1), color=MUTED, lw=1.0)
    # step 1
    c.panel(2.0, bottom, 38.0, top, color=MUTED, fill=0.05)
    c.circle(5.0, top - 3.0, 1.5, "1", color=INK, fill=0.0)
    c.text(7.6, top - 3.0, "score every key", ha="left", weight="bold")
    c.text(24.5, top - 3.0, r"$s_i = s(\mathbf{q}, \mathbf{k}_i)$", ha="left", fs=12)
    rules = [
        ("dot", r"$\mathbf{q}^\top \mathbf{k}_i$"),
        ("scaled dot", r"$\mathbf{q}^\top \mathbf{k}_i \,/\, \sqrt{d_k}$"),
        ("general (bilinear)", r"$\mathbf{q}^\top W \mathbf{k}_i$"),
        (
            "additive (concat)",
            r"$\mathbf{w}_v^\top \tanh(W_q \mathbf{q} + W_k \mathbf{k}_i)$",
        ),
    ]
    for r, (name, formula) in enumerate(rules):
        y = top - 8.2 - r * 4.5
        c.text(4.0, y, name, ha="left", fs=SMALL, color=MUTED)
        c.text(17.5, y, formula, ha="left", fs=12)
    c.note(
        4.0,
        bottom + 1.8,
        'additive: Bahdanau et al. 2015; Luong et al.\'s "concat"',
        fs=8.6,
    )
    # step 2
    x2 = 52.0
    c.panel(x2 - 10.5, bottom, x2 + 10.5, top, color=WEIGHT, fill=0.08)
    c.circle(x2 - 7.5, top - 3.0, 1.5, "2", color=INK, fill=0.0)
    c.text(x2 - 4.9, top - 3.0, "softmax", ha="left", weight="bold")
    c.text(
        x2,
        top - 9.0,
        r"$\alpha_i = \dfrac{\exp\, s_i}{\Sigma_{j=1}^{n} \exp\, s_j}$",
        fs=12,
    )
    alpha = softmax([1.0, 2.0, 0.5, -1.0])
    c.bars(
        x2 - 7.2,
        bottom + 6.3,
        alpha,
        width=2.6,
        height=10.0,
        gap=1.3,
        labels=[rf"$\alpha_{i + 1}$" for i in range(4)],
    )
    c.text(x2, bottom + 1.9, r"$\alpha_i \geq 0, \ \Sigma_i\, \alpha_i = 1$", fs=11)
    # step 3
    x3 = 76.0
    c.panel(x3 - 10.0, bottom, x3 + 10.0, top, color=OUTPUT, fill=0.10)
    c.circle(x3 - 7.0, top - 3.0, 1.5, "3", color=INK, fill=0.0)
    c.text(x3 - 4.4, top - 3.0, "weighted sum", ha="left", weight="bold")
    c.text(
        x3,
        top - 10.0,
        r"$\mathbf{o} = \Sigma_{i=1}^{n}\, \alpha_i \mathbf{v}_i$",
        fs=13,
    )
    c.note(x3, mid - 3.5, "a blend of all the", ha="center", color=INK)
    c.note(x3, mid - 5.6, "values; the largest", ha="center", color=INK)
    c.note(x3, mid - 7.7, "weights dominate", ha="center", color=INK)
    c.box(x3, 4.4, 15, 3.4, r"$\mathbf{v}_1, \dots, \mathbf{v}_n$", color=VALUE, fs=12)
    c.arrow((x3, 6.1), (x3, bottom - 0.1), color=MUTED, lw=1.0)
    c.arrow((x3, top), (x3, 41.2), color=OUTPUT, lw=1.5)
    c.box(x3, 43.0, 5.5, 3.4, r"$\mathbf{o}$", color=OUTPUT, fs=13)
    # between the steps
    c.arrow((38.1, mid), (41.4, mid), lw=1.5)
    c.text(39.7, mid + 2.4, r"$s_i$", fs=12)
    c.arrow((62.6, mid), (65.9, mid), lw=1.5)
    c.text(64.2, mid + 2.4, r"$\alpha_i$", fs=12)
    return c


# --------------------------------------------------------------------------
# 3. soft versus hard


def soft_vs_hard() -> Canvas:
    c = Canvas(h=5.45, y0=-1.5)
    alpha = softmax([1.0, 2.0, 0.5, -1.0])  # the chapter's demo scores
    chosen = 1
    for p, (ox, name) in enumerate([(2.0, "Soft"), (45.0, "Hard")]):
        c.panel(ox, 7.0 - 1.0, ox + 41.0, 49.0)
        sub = (
            "the expectation over all values"
            if p == 0
            else "one index drawn from the same weights"
        )
        c.title(ox + 1.5, 46.4, f"{name} attention")
        c.note(ox + 1.5, 43.4, sub, color=INK)
        xs = [ox + 9.5 + 7 * i for i in range(4)]
        c.bars(
            xs[0] - 1.4, 34.5, alpha, width=2.8, height=8.0, gap=7 - 2.8, labels=None
        )
        c.text(ox + 4.0, 38.0, r"$\alpha$", color=WEIGHT, fs=BIG)
        y_v = 20.5
        for i, x in enumerate(xs):
            faded = p == 1 and i != chosen
            col = FAINT if faded else VALUE
            c.box(
                x,
                y_v,
                5.4,
                3.4,
                color=col,
                fill=0.1 if faded else 0.2,
                text_color=FAINT if faded else INK,
            )
            c.text(x, y_v, rf"$\mathbf{{v}}_{i + 1}$", color=FAINT if faded else INK)
        xo, yo = ox + 20.0, 9.0
        if p == 0:
            for i, x in enumerate(xs):
                c.arrow((x, 34.0), (x, y_v + 1.9), color=WEIGHT, lw=0.8)
                c.arrow(
                    (x, y_v - 1.8),
                    (xo + (x - xo) * 0.25, yo + 2.1),
                    color=WEIGHT,
                    lw=0.6 + 4 * alpha[i],
                )
            c.box(
                xo,
                yo,
                26,
                4.0,
                r"$\mathbf{o}=\Sigma_i\, \alpha_i \mathbf{v}_i"
                r" = \mathbb{E}_{I\sim\alpha}[\mathbf{v}_I]$",
                color=OUTPUT,
                fs=12,
            )
            c.arrow(
                (ox + 37.5, yo), (ox + 37.5, 37.0), color=GREEN, lw=1.4, dashed=True
            )
            c.text(ox + 36.5, 27.5, "✓ gradient", color=GREEN, fs=SMALL, ha="right")
            c.text(ox + 36.5, 25.6, "reaches every", color=GREEN, fs=SMALL, ha="right")
            c.text(
                ox + 36.5, 23.7, r"weight $\alpha_i$", color=GREEN, fs=SMALL, ha="right"
            )
            c.note(
                ox + 1.5, 3.0, "differentiable: trained by backpropagation", color=INK
            )
        else:
            c.box(
                xs[0] + 10.5,
                29.0,
                25.5,
                3.2,
                r"draw $I \sim \mathrm{Categorical}(\alpha)$:  here $I = 2$",
                color=INK,
                fill=0.06,
                fs=SMALL,
            )
            c.arrow((xs[0] + 10.5, 34.0), (xs[0] + 10.5, 30.7), color=WEIGHT, lw=1.0)
            cell = 2.2
            onehot = [[tint(WEIGHT, 0.8) if j == chosen else CARD for j in range(4)]]
            for j, x in enumerate(xs):
                c.grid(
                    x - cell / 2,
                    25.6,
                    [onehot[0][j : j + 1]],
                    cell,
                    ec=MUTED,
                    lw=0.7,
                    texts=[["1" if j == chosen else "0"]],
                )
            c.note(xs[3] + 2.0, 24.5, "one-hot", fs=8.6)
            c.arrow((xs[chosen], y_v - 1.8), (xo - 0.5, yo + 2.1), color=WEIGHT, lw=3)
            c.box(xo, yo, 22, 4.0, r"$\mathbf{o} = \mathbf{v}_I$", color=OUTPUT, fs=12)
            c.arrow(
                (ox + 37.5, yo),
                (ox + 37.5, 37.0),
                color=VERMILLION,
                lw=1.4,
                dashed=True,
            )
            c.text(
                ox + 37.5,
                29.0,
                "✗",
                color=VERMILLION,
                fs=16,
                weight="bold",
                bbox={"fc": CARD, "ec": "none", "pad": 0.5},
            )
            c.text(
                ox + 36.0, 18.2, "no gradient", color=VERMILLION, fs=SMALL, ha="right"
            )
            c.text(
                ox + 36.0,
                16.3,
                "through the draw",
                color=VERMILLION,
                fs=SMALL,
                ha="right",
            )
            c.note(ox + 1.5, 3.0, "ways around: REINFORCE", color=INK)
            c.text(
                ox + 20.0,
                3.0,
                r"$\nabla\mathbb{E}[L]=\mathbb{E}[L\,\nabla\log\alpha_I]$",
                ha="left",
                fs=SMALL,
            )
            c.note(ox + 1.5, 0.8, "or a relaxed sample (Gumbel-softmax)", color=INK)
    return c


# --------------------------------------------------------------------------
# 4. masks


def mask_grid(c: Canvas, x0, y0, allowed, cell, *, rows, cols, col_colors=None):
    allowed = np.asarray(allowed, bool)
    colors = [[ATTEND if a else BLOCKED for a in r] for r in allowed]
    hatches = [[None if a else "////" for a in r] for r in allowed]
    c.grid(x0, y0, colors, cell, hatches=hatches, ec="#FFFFFF", lw=1.2)
    for i, r in enumerate(rows):
        c.text(x0 - 0.5, y0 - (i + 0.5) * cell, r, fs=9.0, ha="right", color=MUTED)
    for j, k in enumerate(cols):
        col = col_colors[j] if col_colors else MUTED
        c.text(x0 + (j + 0.5) * cell, y0 + 0.5, k, fs=9.0, va="bottom", color=col)


def masks_padding_causal() -> Canvas:
    c = Canvas(h=4.4, y0=4.0)
    cell, top = 2.5, 34.0
    c.title(2.5, 43.5, "Masks: which keys each query may attend")
    c.legend(
        57.0,
        43.5,
        [("may attend (True)", ATTEND, None), ("blocked (False)", BLOCKED, "////")],
    )
    # padding
    c.title(2.5, 39.5, "Padding", fs=FS)
    idx5 = [str(j) for j in range(5)]
    pad = [FAINT] * 3 + [VERMILLION] * 2
    for n, (x0, length) in enumerate([(5.0, 5), (21.0, 3)]):
        allowed = np.ones((5, 5), bool)
        allowed[:, length:] = False
        mask_grid(
            c,
            x0,
            top,
            allowed,
            cell,
            rows=idx5,
            cols=idx5,
            col_colors=None if n == 0 else pad,
        )
        if length < 5:
            c.note(
                x0 + (length + (5 - length) / 2) * cell,
                top + 3.0,
                "padding",
                ha="center",
                color=VERMILLION,
                fs=8.6,
            )
        c.note(
            x0 + 2.5 * cell,
            top - 5 * cell - 1.6,
            f"sequence {n + 1}: length {length}",
            ha="center",
            color=INK,
        )
    c.note(2.5, 17.4, "key j is blocked for every query when j ≥ length:", fs=9.0)
    c.note(2.5, 15.5, "one row per sequence, broadcast over the queries", fs=9.0)
    c.text(
        3.2, top - 2.5 * cell, "queries", rotation=90, fs=9.0, color=MUTED, ha="right"
    )
    c.text(5.0 + 2.5 * cell, top + 3.0, "keys", fs=9.0, color=MUTED)
    # causal, top-left
    x0 = 43.0
    c.title(x0 - 3, 39.5, "Causal, top-left", fs=FS)
    mask_grid(c, x0, top, np.tril(np.ones((5, 5), bool)), cell, rows=idx5, cols=idx5)
    c.note(x0 - 3, 17.4, r"$n_q = n_k = 5$: query $i$ may", fs=9.0)
    c.note(x0 - 3, 15.5, r"attend key $j \leq i$; the diagonal", fs=9.0)
    c.note(x0 - 3, 13.6, "starts at the top-left corner", fs=9.0)
    # causal, bottom-right
    x0 = 65.5
    nq, nk = 3, 6
    allowed = np.arange(nk)[None] <= np.arange(nq)[:, None] + (nk - nq)
    c.title(x0 - 3, 39.5, "Causal, bottom-right", fs=FS)
    mask_grid(
        c,
        x0,
        top,
        allowed,
        cell,
        rows=["0", "1", "2"],
        cols=[str(j) for j in range(nk)],
        col_colors=[FAINT] * 3 + [INK] * 3,
    )
    c.note(x0 + 1.5 * cell, top - 3 * cell - 1.2, "cached", ha="center", fs=8.6)
    c.note(x0 + 4.5 * cell, top - 3 * cell - 1.2, "new", ha="center", fs=8.6)
    c.note(x0 - 3, 22.0, "3 new queries (at positions 3-5) over", fs=9.0)
    c.note(x0 - 3, 20.1, "6 keys, as a decoder with a KV", fs=9.0)
    c.note(x0 - 3, 18.2, "cache needs: query i may attend", fs=9.0)
    c.note(x0 - 3, 16.0, r"key $j \leq i + (n_k - n_q)$; the", fs=9.0)
    c.note(x0 - 3, 13.8, "diagonal ends at the bottom-right", fs=9.0)
    c.note(
        2.5,
        10.2,
        "Rows are queries, columns keys. With as many queries as "
        "keys the two causal alignments agree. With fewer queries",
        color=INK,
        fs=9.0,
    )
    c.note(
        2.5,
        8.3,
        "than keys, top-left alignment would hide from the newest "
        "queries the cached keys that came before them.",
        color=INK,
        fs=9.0,
    )
    return c


# --------------------------------------------------------------------------
# 5. self-attention


def heat(color, values, vmax=None):
    values = np.asarray(values, float)
    vmax = np.abs(values).max() if vmax is None else vmax
    return [[tint(color, 0.12 + 0.7 * abs(v) / vmax) for v in row] for row in values]


def self_attention() -> Canvas:
    c = Canvas(h=4.6, y0=2.0)
    rng = np.random.default_rng(3)
    tokens = ["欢迎", "来", "北京"]
    d, dk = 4, 3
    x = rng.normal(size=(3, d))
    wq, wk, wv = (rng.normal(size=(d, dk)) for _ in range(3))
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / np.sqrt(dk)
    a = softmax(s)
    h = a @ v
    cell, big = 2.2, 3.3  # Q, K, V cells; cells with numbers
    top = 37.0
    c.title(2.5, 45.0, "Self-attention: queries, keys and values from one sequence")
    # X
    x0 = 6.5
    yx = top - 7.0
    c.grid(x0, yx, heat("#777777", x, vmax=2.0 * np.abs(x).max()), cell)
    for i, t in enumerate(tokens):
        c.text(x0 - 0.6, yx - cell * (i + 0.5), t, ha="right", fs=SMALL)
    c.text(x0 + 2 * cell, yx + 0.6, r"$X$", va="bottom", fs=12)
    c.note(x0 + 2 * cell, yx - 3 * cell - 1.0, r"$n \times d$", ha="center")
    # Q, K, V
    xm = 23.0
    ys = {"Q": top + 1.0, "K": top - 10.0, "V": top - 21.0}
    mats = {"Q": (q, QUERY), "K": (k, KEY), "V": (v, VALUE)}
    for name, y in ys.items():
        m, col = mats[name]
        c.grid(xm, y, heat(col, m), cell)
        c.text(xm + 1.5 * cell, y + 0.5, rf"${name}$", va="bottom", fs=12)
        c.arrow(
            (x0 + 4 * cell + 0.6, yx - cell * 1.5),
            (xm - 0.6, y - 1.5 * cell),
            color=col,
            lw=1.1,
        )
        c.text(xm - 4.2, y - 1.5 * cell + 1.0, rf"$W_{name}$", fs=11, color=col)
    # scores
    xs, ysc = 38.5, top - 1.5
    c.grid(
        xs,
        ysc,
        heat("#8A8A8A", s, vmax=1.6 * np.abs(s).max()),
        big,
        texts=[[f"{val:.1f}" for val in row] for row in s],
        fs=9.0,
    )
    for i, t in enumerate(tokens):
        c.text(xs - 0.5, ysc - (i + 0.5) * big, t, fs=8.6, ha="right", color=MUTED)
        c.text(xs + (i + 0.5) * big, ysc + 0.4, t, fs=8.6, va="bottom", color=MUTED)
    c.text(xs + 1.5 * big, ysc + 3.0, r"$QK^\top/\sqrt{d_k}$", va="bottom", fs=12)
    c.arrow(
        (xm + 3 * cell + 0.5, ys["Q"] - 1.5 * cell),
        (xs - 4.0, ysc - 2.0),
        color=QUERY,
        lw=1.1,
    )
    c.arrow(
        (xm + 3 * cell + 0.5, ys["K"] - 1.5 * cell),
        (xs - 4.0, ysc - 8.0),
        color=KEY,
        lw=1.1,
    )
    c.text(xs - 6.0, ysc - 7.0, r"$K^\top$", fs=11, color=KEY)
    # weights
    xa = 55.5
    mid = ysc - 1.5 * big
    c.arrow(
        (xs + 3 * big + 0.5, mid),
        (xa - 0.6, mid),
        lw=1.3,
        label="softmax",
        below="each row",
        offset=0.8,
    )
    c.grid(
        xa,
        ysc,
        heat(WEIGHT, a, vmax=1.0),
        big,
        texts=[[f"{val:.2f}" for val in row] for row in a],
        fs=9.0,
    )
    for i, t in enumerate(tokens):
        c.text(xa + (i + 0.5) * big, ysc + 0.4, t, fs=8.6, va="bottom", color=MUTED)
    c.text(xa + 1.5 * big, ysc + 3.0, r"$A$", va="bottom", fs=12)
    c.note(xa + 1.5 * big, ysc - 3 * big - 1.2, "n × n weights,", ha="center")
    c.note(xa + 1.5 * big, ysc - 3 * big - 3.1, "each row sums to 1", ha="center")
    # outputs
    xh, xdot = 76.0, 70.5
    yv = ys["V"] - 1.5 * cell
    c.circle(xdot, mid, 1.3, r"$\cdot$", color=VALUE, fill=0.0)
    c.arrow((xa + 3 * big + 0.4, mid), (xdot - 1.4, mid), lw=1.3)
    c.line([xm + 3 * cell + 0.5, xdot], [yv, yv], color=VALUE, lw=1.1)
    c.arrow((xdot, yv), (xdot, mid - 1.4), color=VALUE, lw=1.1)
    c.text(xdot + 0.8, yv + 1.6, r"$V$", color=VALUE, fs=11, ha="left")
    c.arrow((xdot + 1.4, mid), (xh - 0.6, mid), lw=1.3)
    c.grid(xh, ysc - (3 * big - 3 * cell) / 2, heat(OUTPUT, h), cell)
    c.text(xh + 1.5 * cell, ysc + 0.4, r"$H = AV$", va="bottom", fs=12)
    for i, t in enumerate(tokens):
        c.text(
            xh + 3 * cell + 0.6,
            ysc - (3 * big - 3 * cell) / 2 - (i + 0.5) * cell,
            t,
            ha="left",
            fs=SMALL,
        )
    c.note(xh + 1.5 * cell, ysc - 3 * big - 1.2, "one output", ha="center")
    c.note(xh + 1.5 * cell, ysc - 3 * big - 3.1, "per token", ha="center")
    c.note(
        2.5,
        4.8,
        "Output row i mixes the value rows of all tokens with the "
        "weights in row i of A. Shades show magnitudes;",
        color=INK,
    )
    c.note(
        2.5,
        2.9 + 0.0,
        "the numbers come from random weights, as in an untrained layer.",
        color=INK,
    )
    return c


# --------------------------------------------------------------------------
# 6. the two seq2seq styles


def seq2seq_two_styles() -> Canvas:
    c = Canvas(h=5.8)
    tokens = ["欢迎", "来", "北京"]
    for p, ox in enumerate((1.5, 45.0)):
        c.panel(ox, 1.5, ox + 41.5, 56.5)
        if p == 0:
            c.title(ox + 1.5, 53.5, "Style 1: scaled_dot")
            c.note(
                ox + 1.5,
                50.5,
                r"query = previous decoder state "
                r"$\mathbf{s}_{t-1}$",
                color=INK,
            )
        else:
            c.title(ox + 1.5, 53.5, "Style 2: location")
            c.note(
                ox + 1.5, 50.5, "weights from a dense layer over positions", color=INK
            )
        fx = ox + 13.0  # the flow column
        # encoder states, keys and values
        ex = ox + 34.5
        ey = [38.0, 32.0, 26.0]
        c.note(ex, 42.2, "encoder", ha="center")
        for j, y in enumerate(ey):
            c.box(ex, y, 9.0, 4.0, color=KEY)
            c.text(ex - 2.2, y, rf"$\mathbf{{h}}_{j + 1}$")
            c.text(ex + 1.9, y, tokens[j], fs=SMALL)
        # row 1: inputs of the scores
        if p == 0:
            c.box(fx, 44.5, 9.0, 3.6, r"$\mathbf{s}_{t-1}$", color=QUERY)
        else:
            c.box(
                fx, 44.5, 14.0, 3.6, r"$[\mathbf{e}_t; \mathbf{s}_{t-1}]$", color=QUERY
            )
        c.arrow((fx, 42.7), (fx, 39.9), color=QUERY)
        # row 2: scores
        if p == 0:
            c.box(
                fx,
                37.5,
                22.0,
                4.6,
                r"$e_{tj} = \mathbf{s}_{t-1}^\top \mathbf{h}_j \,/\, \sqrt{H}$",
                color=INK,
                fill=0.05,
            )
            for y in ey:
                c.arrow((ex - 4.6, y), (fx + 11.1, 37.5), color=KEY, lw=1.1)
            c.note(fx + 12.0, 40.4, "keys", color=KEY)
        else:
            c.box(
                fx,
                37.5,
                22.0,
                4.6,
                r"$[\mathbf{e}_t; \mathbf{s}_{t-1}]\, W_\ell + \mathbf{b}_\ell$",
                color=INK,
                fill=0.05,
            )
            c.note(fx, 34.0, "L scores, one per position", ha="center", fs=8.6)
            for y in ey:
                c.line([fx + 11.1, ex - 4.6], [37.5, y], color=FAINT, dashed=True)
            c.text(
                fx + 13.6,
                37.1,
                "✗",
                color=VERMILLION,
                fs=13,
                weight="bold",
                bbox={"fc": CARD, "ec": "none", "pad": 0.3},
                zorder=5,
            )
        # row 3: weights
        c.arrow((fx, 35.1 if p == 0 else 32.8), (fx, 30.6), label=None)
        c.note(fx + 1.0, 32.0 if p == 0 else 31.5, "softmax over j", fs=8.6)
        weights = [0.12, 0.13, 0.75] if p == 0 else [0.45, 0.35, 0.20, 0.0, 0.0]
        bw = 2.2
        n = len(weights)
        x_first = fx - (n * bw + (n - 1) * 0.9) / 2
        c.bars(
            x_first,
            23.0,
            weights,
            width=bw,
            height=7.0,
            gap=0.9,
            values=False,
            labels=[str(j + 1) for j in range(n)],
            fs=8.6,
            hatched=(3, 4) if p == 1 else (),
        )
        c.text(x_first - 1.2, 25.5, r"$\alpha_{tj}$", ha="right", color=WEIGHT)
        if p == 1:
            c.note(x_first + n * (bw + 0.9) - 0.6, 27.5, "masked", fs=8.6)
        # row 4: context
        c.arrow((fx, 20.9), (fx, 19.0))
        c.box(
            fx,
            16.8,
            17.0,
            4.4,
            r"$\mathbf{c}_t = \Sigma_j \alpha_{tj} \mathbf{h}_j$",
            color=VALUE,
        )
        c.arrow(
            (ex, ey[2] - 2.0),
            (fx + 8.6, 16.8),
            color=VALUE,
            lw=1.4,
            rad=-0.25,
            label=None,
        )
        c.note(ex - 1.0, 19.0, "values", color=VALUE)
        # row 5: the decoder step
        c.arrow((fx, 14.6), (fx, 11.7))
        c.box(ox + 4.0, 8.0, 5.2, 3.6, r"$\mathbf{e}_t$", color=INK, fill=0.05)
        c.arrow((ox + 6.6, 8.0), (ox + 8.2, 8.0))
        combine = (
            r"$[\mathbf{e}_t; \mathbf{c}_t]\, W + \mathbf{b}$"
            if p == 0
            else r"$\mathrm{ReLU}([\mathbf{e}_t; \mathbf{c}_t]\, W"
            r" + \mathbf{b})$"
        )
        c.box(ox + 17.5, 8.0, 18.6, 4.4, combine, color=INK, fill=0.05, fs=9.5)
        c.arrow((ox + 26.8, 8.0), (ox + 28.4, 8.0))
        c.box(ox + 31.4, 8.0, 6.0, 3.6, "GRU", color=INK, fill=0.12, fs=SMALL)
        c.arrow((ox + 34.4, 8.0), (ox + 36.0, 8.0))
        c.text(ox + 38.3, 8.0, r"$\mathbf{s}_t$", color=QUERY)
        c.note(ox + 1.5, 3.0, "embedding of the previous word", fs=8.6)
        if p == 0:
            c.note(ex - 6.0, 46.0, "scores read", fs=8.6, color=KEY)
            c.note(ex - 6.0, 44.2, "every state", fs=8.6, color=KEY)
        else:
            c.note(ex - 6.2, 46.0, "scores never", fs=8.6, color=VERMILLION)
            c.note(ex - 6.2, 44.2, r"read $\mathbf{h}_j$", fs=8.6, color=VERMILLION)
    return c


# --------------------------------------------------------------------------
# 7. cross-attention


def cross_attention() -> Canvas:
    c = Canvas(h=4.7)
    src = ["欢迎", "来", "北京"]
    out = ["welcome", "to", "Beijing"]
    w = np.array([[0.80, 0.12, 0.08], [0.15, 0.70, 0.15], [0.05, 0.10, 0.85]])
    step = 2
    c.title(
        2.5, 44.0, "Cross-attention: the decoder's states query the encoder's states"
    )
    xs = [12.0, 27.0, 42.0]
    yd, ye = 31.0, 12.0
    for t, x in enumerate(xs):
        hot = t == step
        c.box(
            x, yd, 8.0, 3.6, color=QUERY if hot else FAINT, fill=0.25 if hot else 0.08
        )
        c.text(x, yd, rf"$\mathbf{{s}}_{t + 1}$", color=INK if hot else MUTED)
        c.arrow((x, yd + 1.8), (x, yd + 4.6), color=INK if hot else FAINT, lw=1.0)
        c.text(
            x,
            yd + 6.2,
            out[t],
            weight="bold" if hot else "normal",
            color=INK if hot else MUTED,
        )
        c.box(x, ye, 8.0, 3.6, color=KEY)
        c.text(x, ye, rf"$\mathbf{{h}}_{t + 1}$")
        c.arrow((x, ye - 5.0), (x, ye - 1.8), color=MUTED, lw=1.0)
        c.text(x, ye - 6.5, src[t])
    for t, xd in enumerate(xs):  # faint lines of the other steps
        if t == step:
            continue
        for xe in xs:
            c.line([xd, xe], [yd - 1.8, ye + 1.8], color="#DADADA", lw=0.8, zorder=1)
    for j, xe in enumerate(xs):
        c.arrow(
            (xe, ye + 1.8),
            (xs[step] + (xe - xs[step]) * 0.15, yd - 1.8),
            color=WEIGHT,
            lw=0.6 + 4.5 * w[step, j],
            zorder=2,
        )
        fx = xe + (xs[step] - xe) * 0.45
        c.text(
            fx,
            ye + 1.8 + (yd - ye - 3.6) * 0.45,
            f"{w[step, j]:.2f}",
            fs=SMALL,
            color=WEIGHT,
            weight="bold",
            bbox={"fc": CARD, "ec": "none", "pad": 0.4},
            zorder=4,
        )
    c.note(49.0, yd + 1.0, "queries:", color=QUERY)
    c.note(49.0, yd - 1.0, "decoder states", color=QUERY)
    c.note(49.0, yd - 3.0, "(one per output word)", color=QUERY, fs=8.6)
    c.note(49.0, ye, "keys and values:", color=KEY)
    c.note(49.0, ye - 2.0, "encoder states", color=KEY)
    c.note(
        2.5,
        3.0,
        'Writing "Beijing": its query scores all three source '
        "states and reads mostly 北京.",
        color=INK,
    )
    # the weight matrix
    cell, gx, gy = 4.0, 70.0, 34.0
    c.grid(
        gx,
        gy,
        heat(WEIGHT, w, vmax=1.0),
        cell,
        texts=[[f"{v:.2f}" for v in row] for row in w],
        fs=9.0,
    )
    c.outline(gx, gy - step * cell, 3 * cell, cell, color=VERMILLION, lw=2.0)
    for j, t in enumerate(src):
        c.text(gx + (j + 0.5) * cell, gy + 0.5, t, fs=SMALL, va="bottom")
    for i, t in enumerate(out):
        c.text(
            gx - 0.6,
            gy - (i + 0.5) * cell,
            t,
            fs=SMALL,
            ha="right",
            weight="bold" if i == step else "normal",
        )
    c.note(
        gx + 1.5 * cell, gy - 3 * cell - 1.6, "weights: row = output word,", ha="center"
    )
    c.note(gx + 1.5 * cell, gy - 3 * cell - 3.5, "each row sums to 1", ha="center")
    c.note(
        gx + 1.5 * cell,
        gy - 3 * cell - 5.4,
        "(illustrative numbers)",
        ha="center",
        fs=8.6,
    )
    return c


# --------------------------------------------------------------------------
# 8. multi-head split and merge


def tensor(
    c: Canvas,
    x0,
    y0,
    rows,
    groups,
    cell,
    *,
    gap=0.0,
    colors=HEADS,
    amount=0.55,
    label=None,
):
    """A (rows, groups x len) block: group g coloured ``colors[g]``; groups
    separated by ``gap``. (x0, y0) is the top-left corner; returns the width."""
    x = x0
    for g, (n, col) in enumerate(zip(groups, colors, strict=False)):
        c.grid(x, y0, [[tint(col, amount)] * n] * rows, cell, lw=0.7)
        x += n * cell + (gap if g < len(groups) - 1 else 0)
    if label:
        c.note((x0 + x) / 2, y0 - rows * cell - 1.2, label, ha="center", color=INK)
    return x - x0


def multihead_split_merge() -> Canvas:
    c = Canvas(h=4.9, y0=4.0)
    cell, rows, h, dh = 1.15, 3, 4, 2
    dm = h * dh
    y_top, y_bot = 44.0, 19.5
    c.title(
        2.5, 50.0, "Splitting and merging heads (T = 3, d_model = 8, h = 4, d_head = 2)"
    )
    # top row: left to right
    x = 3.5
    w = tensor(
        c, x, y_top, rows, [dm], cell, colors=["#8C8C8C"], amount=0.35, label="input X"
    )
    c.note(x + w / 2, y_top + 1.2, "(B, T, d_model)", ha="center", fs=8.6)
    x1 = x + w + 11.0
    c.arrow(
        (x + w + 0.8, y_top - 2),
        (x1 - 0.8, y_top - 2),
        label="linear",
        below="(B, T, d_model)",
        fs=8.6,
    )
    w = tensor(c, x1, y_top, rows, [dh] * h, cell, label="Q = X W_q")
    c.note(
        x1 + w / 2, y_top - rows * cell - 3.1, "(K and V alike)", ha="center", fs=8.6
    )
    x2 = x1 + w + 11.0
    c.arrow(
        (x1 + w + 0.8, y_top - 2),
        (x2 - 0.8, y_top - 2),
        label="reshape",
        below="(B, T, h, d_head)",
        fs=8.6,
    )
    w = tensor(c, x2, y_top, rows, [dh] * h, cell, gap=0.9, label="heads cut apart")
    x3 = x2 + w + 11.0
    c.arrow(
        (x2 + w + 0.8, y_top - 2),
        (x3 - 0.8, y_top - 2),
        label="transpose",
        below="(B, h, T, d_head)",
        fs=8.6,
    )
    slabs_x = []
    for g in range(h):  # one slab per head, stacked like batch entries
        sx = x3 + g * (dh * cell + 1.4)
        tensor(c, sx, y_top, rows, [dh], cell, colors=[HEADS[g]])
        c.text(sx + cell, y_top + 0.5, f"{g + 1}", fs=8.6, va="bottom", color=MUTED)
        slabs_x.append(sx)
    right = slabs_x[-1] + dh * cell
    c.note(x3 - 0.5, y_top + 1.2, "head", ha="right", fs=8.6)
    c.note(
        (x3 + right) / 2,
        y_top - rows * cell - 1.2,
        "h slabs, like a batch",
        ha="center",
        color=INK,
    )
    # attention per head
    ya = (y_top - rows * cell + y_bot) / 2 - 1.0
    xc = (x3 + right) / 2
    c.box(min(xc, c.W - 12.5), ya, 21.0, 5.4, color=WEIGHT, fill=0.12)
    c.text(min(xc, c.W - 12.5), ya + 1.1, "attention per head", fs=SMALL)
    c.text(
        min(xc, c.W - 12.5),
        ya - 1.2,
        r"$\mathrm{softmax}(Q_h K_h^\top / \sqrt{d_{\mathrm{head}}})\, V_h$",
        fs=SMALL,
    )
    c.arrow((xc, y_top - rows * cell - 2.6), (xc, ya + 2.8))
    c.arrow((xc, ya - 2.8), (xc, y_bot + 1.4))
    c.note(xc + 1.0, ya - 4.8, "(B, h, T, d_head)", fs=8.6)
    # bottom row: right to left
    for g, sx in enumerate(slabs_x):
        tensor(c, sx, y_bot, rows, [dh], cell, colors=[HEADS[g]], amount=0.8)
    c.note(
        (x3 + right) / 2,
        y_bot - rows * cell - 1.2,
        "one output per head",
        ha="center",
        color=INK,
    )
    xb2 = x2
    w = tensor(
        c,
        xb2,
        y_bot,
        rows,
        [dh] * h,
        cell,
        gap=0.9,
        amount=0.8,
        label="back to (B, T, h, d_head)",
    )
    c.arrow(
        (x3 - 0.8, y_bot - 2),
        (xb2 + w + 0.8, y_bot - 2),
        label="transpose back",
        below="(B, T, h, d_head)",
        fs=8.6,
    )
    xb1 = x1
    w1 = tensor(
        c, xb1, y_bot, rows, [dh] * h, cell, amount=0.8, label="heads side by side"
    )
    c.arrow(
        (xb2 - 0.8, y_bot - 2),
        (xb1 + w1 + 0.8, y_bot - 2),
        label="concatenate",
        below="(B, T, d_model)",
        fs=8.6,
    )
    w0 = tensor(
        c, x, y_bot, rows, [dm], cell, colors=[OUTPUT], amount=0.6, label="output"
    )
    c.arrow(
        (xb1 - 0.8, y_bot - 2),
        (x + w0 + 0.8, y_bot - 2),
        below="(B, T, d_model)",
        fs=8.6,
    )
    c.text((xb1 + x + w0) / 2, y_bot - 0.6, r"$W_o$", va="bottom", fs=11)
    c.note(
        2.5,
        7.0,
        "Each colour is one head's d_head features. Split and merge "
        "only reshape and transpose; W_o mixes the heads.",
        color=INK,
    )
    return c


# --------------------------------------------------------------------------
# 9. mask polarity of the built-ins


def builtin_mask_polarity() -> Canvas:
    c = Canvas(h=5.2, y0=-1.0)
    c.title(
        2.5, 47.5, "The same mask in each API: keys 0-2 are words, key 3 is padding"
    )
    mono = {"family": "DejaVu Sans Mono"}
    rows = [
        ("Keras Attention,", "AdditiveAttention", "mask=[q_mask, v_mask]", True),
        ("Keras", "MultiHeadAttention", "attention_mask", True),
        ("keras.ops.", "dot_product_attention", "mask", True),
        ("torch F.", "scaled_dot_product_attention", "attn_mask (bool)", True),
        (
            "torch nn.",
            "MultiheadAttention",
            "attn_mask,\nkey_padding_mask (bool)",
            False,
        ),
        ("attncourse", "(this course)", "mask", True),
    ]
    x_api, x_arg, x_mean, x_cells = 2.5, 31.0, 56.0, 70.0
    for x, s in [(x_api, "API"), (x_arg, "boolean argument"), (x_mean, "True means")]:
        c.text(x, 43.3, s, ha="left", fs=SMALL, color=MUTED, weight="bold")
    cell = 3.0
    c.text(x_cells - 0.8, 43.3, "key", ha="right", fs=SMALL, color=MUTED, weight="bold")
    for j in range(4):
        c.text(
            x_cells + (j + 0.5) * cell,
            43.3,
            str(j),
            fs=SMALL,
            color=MUTED,
            weight="bold",
        )
    for r, (pre, name, arg, attend) in enumerate(rows):
        y = 39.4 - r * 5.0
        if not attend:
            c.panel(
                1.5, y - 2.3, c.W - 1.5, y + 2.3, color=VERMILLION, fill=0.08, lw=1.2
            )
        c.text(x_api, y + 0.9, pre, ha="left", fs=9.0, color=MUTED, **mono)
        c.text(x_api, y - 1.0, name, ha="left", fs=SMALL, **mono)
        c.text(x_arg, y, arg, ha="left", fs=9.0, **mono)
        c.text(
            x_mean,
            y,
            "attend" if attend else "BLOCKED",
            ha="left",
            weight="bold",
            color=BLUE if attend else VERMILLION,
        )
        allowed = [True, True, True, False]
        values = [a if attend else not a for a in allowed]
        c.grid(
            x_cells,
            y + cell / 2,
            [[ATTEND if a else BLOCKED for a in allowed]],
            cell,
            hatches=[[None if a else "////" for a in allowed]],
            texts=[["T" if v else "F" for v in values]],
            fs=SMALL,
        )
    c.legend(
        66.0,
        6.5,
        [("attended", ATTEND, None), ("blocked", BLOCKED, "////")],
        cell=1.5,
        gap=1.5,
    )
    c.note(
        2.5,
        6.5,
        "Float masks (torch) are added to the scores: 0 keeps a key, -inf blocks it.",
        color=INK,
    )
    c.note(
        2.5,
        3.5,
        "Letters: the boolean you pass; colours: what the API does "
        "with it. Handing a True = attend mask to nn.MultiheadAttention",
        color=INK,
    )
    c.note(2.5, 1.6, "blocks exactly the keys you meant to keep.", color=INK)
    return c


# --------------------------------------------------------------------------
# 10. cost and tiles


def attention_cost_tiles() -> Canvas:
    c = Canvas(h=4.9)
    c.title(2.5, 45.5, "The n × n table, and the tiled way around it")
    # left: quadratic growth, drawn to scale
    base, cell = 10.0, 1.15
    x = 3.5
    for n in (4, 8, 16):
        side = n * cell
        c.rect(x, base, side, side, fc=tint(WEIGHT, 0.35), ec=WEIGHT, lw=1.0)
        for k in range(1, n):  # the cell grid
            c.line(
                [x + k * cell, x + k * cell], [base, base + side], color=CARD, lw=0.5
            )
            c.line([x, x + side], [base + k * cell] * 2, color=CARD, lw=0.5)
        c.note(x + side / 2, base - 1.6, f"n = {n}", ha="center", color=INK)
        c.note(x + side / 2, base - 3.5, f"{n * n} scores", ha="center")
        x += side + 2.2
    c.note(3.5, 38.5, "Every query scores every key: twice the", color=INK)
    c.note(3.5, 36.6, "length, four times the scores. Time and", color=INK)
    c.note(3.5, 34.7, "memory grow as O(n²).", color=INK)
    c.line([42.5, 42.5], [4.0, 42.0], color=CARD_EDGE, lw=0.9)
    # right: tiles
    n, b, cell = 16, 4, 1.0
    gx, gy = 49.0, 35.0
    side = n * cell
    qb, kb = 1, 2  # the query block and the key block alive now
    c.rect(gx, gy - side, side, side, fc=CARD, ec=FAINT, lw=0.8)
    for k in range(1, n // b):
        c.line([gx + k * b * cell] * 2, [gy - side, gy], color=FAINT, lw=0.6)
        c.line([gx, gx + side], [gy - k * b * cell] * 2, color=FAINT, lw=0.6)
    row_y = gy - (qb + 1) * b * cell
    for j in range(kb):  # done: folded into the running sums
        c.rect(
            gx + j * b * cell,
            row_y,
            b * cell,
            b * cell,
            fc=tint(WEIGHT, 0.25),
            ec=FAINT,
            lw=0.6,
        )
    c.rect(
        gx + kb * b * cell,
        row_y,
        b * cell,
        b * cell,
        fc=tint(WEIGHT, 0.8),
        ec=INK,
        lw=1.6,
        zorder=3,
    )
    c.rect(
        gx + (kb + 1) * b * cell,
        row_y,
        b * cell,
        b * cell,
        fc=CARD,
        ec=WEIGHT,
        lw=1.0,
        zorder=2,
    )
    # Q block at left, K/V blocks on top
    c.rect(gx - 2.2, row_y, 1.4, b * cell, fc=tint(QUERY, 0.6), ec=QUERY, lw=0.8)
    c.text(
        gx - 2.8,
        row_y + b * cell / 2,
        "query block",
        rotation=90,
        fs=8.6,
        ha="right",
        color=QUERY,
    )
    for j in range(n // b):
        live = j == kb
        c.rect(
            gx + j * b * cell,
            gy + 0.8,
            b * cell,
            1.4,
            fc=tint(KEY, 0.7 if live else 0.2),
            ec=KEY,
            lw=1.2 if live else 0.6,
        )
    c.note(
        gx + side / 2,
        gy + 3.4,
        "key / value blocks stream in  →",
        ha="center",
        color=KEY,
    )
    c.note(gx, gy - side - 1.8, "light: done, folded into m, ℓ, u", fs=8.6)
    c.note(gx, gy - side - 3.7, "dark: the one tile alive now", fs=8.6, color=INK)
    # the running statistics
    tx = gx + side + 2.5
    c.text(tx, 34.0, "per query, after each block:", ha="left", fs=SMALL, color=MUTED)
    c.text(
        tx, 30.0, r"$m' = \max(m, \mathrm{max}_{j \in B}\, s_j)$", ha="left", fs=SMALL
    )
    c.text(
        tx,
        25.6,
        r"$\ell' = e^{m-m'}\ell + \Sigma_{j\in B} e^{s_j - m'}$",
        ha="left",
        fs=SMALL,
    )
    c.text(
        tx,
        21.0,
        r"$\mathbf{u}' = e^{m-m'}\mathbf{u}+\Sigma_{j\in B}e^{s_j-m'}\mathbf{v}_j$",
        ha="left",
        fs=SMALL,
    )
    c.text(tx, 16.6, r"end: $\mathbf{o} = \mathbf{u} / \ell$", ha="left", fs=SMALL)
    c.note(tx, 12.6, "exact, not an approximation;", color=INK)
    c.note(tx, 10.7, "memory O(n · block)", color=INK)
    c.note(
        45.0,
        6.0,
        "m: running max, ℓ: sum of exponentials, u: unnormalised output",
        fs=8.6,
    )
    return c


FIGURES: dict[str, Callable[[], Canvas]] = {
    "addressing-qkv": addressing_qkv,
    "scoring-three-steps": scoring_three_steps,
    "soft-vs-hard": soft_vs_hard,
    "masks-padding-causal": masks_padding_causal,
    "self-attention": self_attention,
    "seq2seq-two-styles": seq2seq_two_styles,
    "cross-attention": cross_attention,
    "multihead-split-merge": multihead_split_merge,
    "builtin-mask-polarity": builtin_mask_polarity,
    "attention-cost-tiles": attention_cost_tiles,
}


# --------------------------------------------------------------------------
# output


def svg_bytes(fig) -> bytes:
    """The figure as SVG without the DOCTYPE (an external DTD URL) and without
    metadata (the Matplotlib version and a URL), so the file names nothing
    outside itself, and with its path data compacted."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    text = re.sub(r"<!DOCTYPE[^>]*>\n?", "", text)
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    # path data on one line ("M 0 1 \nL 2 3 \nz\n" -> "M 0 1 L 2 3 z"), its
    # coordinates to 0.01 pt (glyph outlines are whole font units already): a
    # third smaller, the same drawing
    text = re.sub(
        r'd="([^"]*)"',
        lambda m: 'd="' + " ".join(map(_short, m[1].split())) + '"',
        text,
    )
    return text.encode("utf-8")


def _short(token: str) -> str:
    """A path-data token with its number to 2 decimals ("20.86875" -> "20.87")."""
    if "." not in token:
        return token
    short = f"{float(token):.2f}".rstrip("0").rstrip(".")
    return "0" if short == "-0" else short


def all_figures() -> dict[str, Callable[[], Canvas]]:
    """FIGURES plus each ``fig_*.py`` module's FIGURES in this folder (one module
    per chapter of part 3 onwards; they import their helpers from here)."""
    figures = dict(FIGURES)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    for path in sorted(HERE.glob("fig_*.py")):
        module = importlib.import_module(path.stem)
        clash = sorted(set(module.FIGURES) & set(figures))
        if clash:
            raise SystemExit(f"{path.name} redefines figure(s) {clash}")
        figures.update(module.FIGURES)
    return figures


def draw(
    names: Sequence[str], out: Path, png: Path | None = None, language: str = "en"
) -> list[Path]:
    """Draw the figures ``names`` into ``out`` (and PNG previews into ``png``) with
    the labels of ``language``. A figure with a Chinese label missing from
    labels_zh.LABELS is not written, and draw() fails after the others; drawing
    every figure in Chinese also fails on an entry of LABELS that none draws."""
    global LANGUAGE, _FIGURE
    if language not in LANGUAGES:
        raise SystemExit(f"unknown language {language!r}; known: {list(LANGUAGES)}")
    FIGURES = all_figures()
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise SystemExit(f"unknown figure(s): {unknown}; known: {sorted(FIGURES)}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    LANGUAGE = language
    _MISSING.clear()
    _USED.clear()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            register_cjk_font(Path(tmp))
            style()
            for name in names:
                _FIGURE = name
                canvas = FIGURES[name]()
                if name not in _MISSING:
                    path = out / f"{name}.svg"
                    path.write_bytes(svg_bytes(canvas.fig))
                    written.append(path)
                    if png is not None:
                        png.mkdir(parents=True, exist_ok=True)
                        canvas.fig.savefig(png / f"{name}.png", dpi=110)
                plt.close(canvas.fig)
    finally:
        LANGUAGE, _FIGURE = "en", ""
    problems = [
        f"  {name}: {s!r}" for name, missing in _MISSING.items() for s in missing
    ]
    if problems:
        problems.insert(
            0,
            f"{len(problems)} label(s) missing from book/figures/labels_zh.py "
            "(figures not written):",
        )
    if language == "zh" and set(names) == set(FIGURES):
        from labels_zh import LABELS

        unused = [s for s in LABELS if s not in _USED]  # the English lost them
        if unused:
            problems.append(
                f"{len(unused)} label(s) of book/figures/labels_zh.py that no "
                "figure draws:"
            )
            problems += [f"  {s!r}" for s in unused]
    if problems:
        raise SystemExit("\n".join(problems))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="figures to draw (default: all)")
    parser.add_argument(
        "--out",
        type=Path,
        help="folder for the SVGs (default: book/figures, or book/figures/zh for zh)",
    )
    parser.add_argument("--png", type=Path, help="also write PNG previews here")
    parser.add_argument(
        "--language", choices=LANGUAGES, default="en", help="the labels' language"
    )
    args = parser.parse_args(argv)
    out = args.out or (HERE if args.language == "en" else HERE / args.language)
    names = args.names or list(all_figures())
    for path in draw(names, out, args.png, language=args.language):
        print(path)
    return 0


if __name__ == "__main__":
    # the fig_*.py modules import this file as ``draw``: let them share this module
    # (and its LANGUAGE) rather than load a second copy
    sys.modules.setdefault("draw", sys.modules[__name__])
    sys.exit(main())
