"""Progress bars for training loops that look right in JupyterLab and on the site."""

import sys

from tqdm import tqdm


def progress(
    iterable=None, *, desc: str | None = None, total: int | None = None, **kwargs
):
    """A text tqdm bar on stdout that refreshes at most every few seconds.

    Text (not a widget) so the executed notebook stays self-contained and the
    static site needs no widget JavaScript; stdout (not stderr) so graders and
    readers do not mistake it for a warning. The final line keeps the totals.
    """
    kwargs.setdefault("mininterval", 5.0)
    kwargs.setdefault("ncols", 80)
    kwargs.setdefault("ascii", True)
    return tqdm(iterable, desc=desc, total=total, file=sys.stdout, **kwargs)
