"""Matplotlib helpers: attention heatmaps that render Chinese tokens as glyphs.

The CJK font ships with the PyPI package ``noto-cjk-sans-otc`` (Noto Sans CJK,
SIL OFL), a dependency of this package, so 欢迎 来 北京 renders on a fresh
machine without system fonts.
"""

from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib import pyplot as plt

from attncourse.notebook import to_numpy

_CJK_FAMILY: str | None = None


def use_cjk_font() -> str:
    """Register the bundled Noto Sans CJK font and make it a sans-serif fallback.

    Returns the font family name. Latin text keeps DejaVu Sans; characters it
    lacks fall back to the CJK font (Matplotlib >= 3.6 falls back per glyph).
    """
    global _CJK_FAMILY
    if _CJK_FAMILY is None:
        import noto_cjk_sans_otc

        path = str(noto_cjk_sans_otc.FONT_PATH)
        font_manager.fontManager.addfont(path)
        _CJK_FAMILY = font_manager.FontProperties(fname=path).get_name()
    # A list of concrete families enables Matplotlib's per-glyph fallback.
    matplotlib.rcParams["font.family"] = ["DejaVu Sans", _CJK_FAMILY]
    return _CJK_FAMILY


def show_heatmaps(
    matrices,
    *,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    xlabel: str = "keys",
    ylabel: str = "queries",
    cmap: str = "Reds",
    annotate: bool = False,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    width: float = 2.6,
):
    """Plot one or more attention-weight matrices side by side.

    matrices: (num_queries, num_keys), or (num_plots, num_queries, num_keys) for
    several panels (e.g. one per head or per scoring function); NumPy, TF or
    torch. Tick labels may be tokens in any script. Returns the figure.
    """
    use_cjk_font()
    data = _panels(matrices, xlabels, ylabels, titles)  # (num_plots, rows, cols)
    n, rows, cols = data.shape
    height = max(1.6, width * rows / max(cols, 1)) + 0.6
    fig, axes = plt.subplots(
        1, n, figsize=(width * n + 0.8, height), squeeze=False, layout="constrained"
    )
    vmax = float(data.max()) if vmax is None else vmax
    for k, ax in enumerate(axes[0]):
        im = ax.imshow(data[k], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        ax.set_xticks(range(cols), xlabels if xlabels is not None else range(cols))
        ax.set_yticks(range(rows), ylabels if ylabels is not None else range(rows))
        ax.set_xlabel(xlabel)
        if k == 0:
            ax.set_ylabel(ylabel)
        if titles is not None:
            ax.set_title(titles[k], fontsize=10)
        if annotate:
            _annotate(ax, data[k], im)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    return fig


def _panels(matrices, xlabels, ylabels, titles) -> np.ndarray:
    """The matrices as (num_plots, rows, cols), checked against the labels."""
    data = to_numpy(matrices)
    if data.ndim == 2:
        data = data[None]
    if data.ndim != 3:
        raise ValueError(
            f"matrices must have shape (num_queries, num_keys) or (num_plots, "
            f"num_queries, num_keys), got {data.shape}"
        )
    n, rows, cols = data.shape
    for name, labels, size in (("xlabels", xlabels, cols), ("ylabels", ylabels, rows)):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} has {len(labels)} labels for {size} positions")
    if titles is not None and len(titles) != n:
        raise ValueError(f"titles has {len(titles)} entries for {n} matrices")
    return data


def _annotate(ax, matrix, image=None):
    """Write each weight, to two decimals, in its cell: white on dark cells,
    black on light ones (by the cell colour's luminance), so every number stays
    readable whatever the colour map."""
    rows, cols = matrix.shape
    light = np.ones_like(matrix, dtype=bool)
    if image is not None:
        rgb = image.cmap(image.norm(matrix))[..., :3]
        light = rgb @ np.array([0.299, 0.587, 0.114]) > 0.5
    for i in range(rows):
        for j in range(cols):
            colour = "black" if light[i, j] else "white"
            text = f"{matrix[i, j]:.2f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)


def tilt_key_labels(fig, degrees: float = 45):
    """Tilt the key (x) tick labels of a show_heatmaps figure so neighbouring
    labels -- <pad> tokens, long words -- do not collide."""
    for ax in fig.axes[:-1]:  # the last axes is the colour bar
        ax.tick_params(axis="x", labelrotation=degrees)
