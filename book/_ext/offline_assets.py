"""Serve MathJax from the site itself, so the book works offline.

Sphinx loads MathJax 3 from a CDN by default. This extension copies the ES5
build shipped by the PyPI package ``django-static-mathjax`` (MathJax 3.2.2,
Apache-2.0; the Django integration is unused) into ``_static/mathjax/`` of the
HTML output and points ``mathjax_path`` at it. Only the parts a page can load
are copied: the combined TeX/CHTML component plus the pieces it loads lazily.
"""

import shutil
from importlib.util import find_spec
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

PARTS = ["tex-chtml.js", "input/tex", "output/chtml", "ui", "a11y", "adaptors"]
TARGET = "mathjax"  # below _static/


def mathjax_source() -> Path:
    spec = find_spec("mathjax")
    es5 = None
    if spec is not None and spec.submodule_search_locations:
        es5 = Path(next(iter(spec.submodule_search_locations))) / "static/mathjax/es5"
    if es5 is None or not (es5 / "tex-chtml.js").is_file():
        raise ExtensionError(
            "MathJax 3 not found: install the pinned 'django-static-mathjax' "
            "(see requirements.txt); the offline site needs a local MathJax"
        )
    return es5


def copy_mathjax(app: Sphinx, exc: Exception | None) -> None:
    if exc is not None or app.builder.format != "html":
        return
    src, dest = mathjax_source(), Path(app.outdir) / "_static" / TARGET
    for part in PARTS:
        s, d = src / part, dest / part
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


def configure(app: Sphinx, config) -> None:
    mathjax_source()  # fail early, before any notebook executes
    config.mathjax_path = f"{TARGET}/tex-chtml.js"


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", configure, priority=900)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
