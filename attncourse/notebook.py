"""Helpers for chapters run as notebooks (JupyterLab or the book build)."""

import inspect


def show_source(obj):
    """Display the source of a library function or class, syntax-highlighted.

    Chapters show the package's code instead of keeping a second copy of it, so
    the text can never drift from what the tests check.
    """
    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")
