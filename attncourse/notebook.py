"""Helpers for chapters run as notebooks (JupyterLab or the book build)."""

import inspect

import numpy as np


def show_source(obj):
    """Display the source of a library function or class, syntax-highlighted.

    Chapters show the package's code instead of keeping a second copy of it, so
    the text can never drift from what the tests check.
    """
    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")


def to_numpy(x) -> np.ndarray:
    """A NumPy float64 copy of a NumPy array, TF tensor or torch tensor (one
    that requires grad or lives on a GPU included)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.array(x, dtype=np.float64)


def max_diff(a, b) -> float:
    """Largest absolute difference of two arrays of any framework, in float64;
    NaN anywhere counts as infinitely far (inf)."""
    gap = np.abs(to_numpy(a) - to_numpy(b))
    return np.inf if np.isnan(gap).any() else float(gap.max())
