"""Serve MathJax from the site itself, so the book works offline.

Sphinx loads MathJax 3 from a CDN by default. This extension copies the ES5
build shipped by the PyPI package ``django-static-mathjax`` (MathJax 3.2.2,
Apache-2.0; the Django integration is unused) into ``_static/mathjax/`` of the
HTML output and points ``mathjax_path`` at it.

Page weight: the combined ``tex-chtml.js`` (1.16 MB) carries the 426 kB
right-click menu (``ui/menu``) that no reader needs. Instead the pages load the
small ``startup.js`` and let MathJax's loader fetch only the components they
use (``LOAD`` below: TeX input, CHTML output with its font data, and the
assistive MathML that screen readers read), about 760 kB. CHTML then fetches the
few woff fonts the page's formulas use; TeX extensions outside ``input/tex.js``
(boldsymbol, cancel, ...) are autoloaded from ``input/tex/extensions``
when a formula needs them. Only these parts are copied.
"""

import shutil
from importlib.util import find_spec
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

ENTRY = "startup.js"
# components the loader fetches on every page with math (file = name + ".js")
LOAD = ["input/tex", "output/chtml", "a11y/assistive-mml"]
PARTS = [
    ENTRY,
    "core.js",
    "input/tex.js",
    "input/tex",  # the extensions TeX's autoload may fetch
    "output/chtml.js",
    "output/chtml",  # its font data (fonts/tex.js) and woff fonts
    "a11y/assistive-mml.js",
]
TARGET = "mathjax"  # below _static/


def mathjax_source() -> Path:
    spec = find_spec("mathjax")
    es5 = None
    if spec is not None and spec.submodule_search_locations:
        es5 = Path(next(iter(spec.submodule_search_locations))) / "static/mathjax/es5"
    if es5 is None or not all((es5 / p).exists() for p in PARTS):
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
    config.mathjax_path = f"{TARGET}/{ENTRY}"
    # merged into what other extensions set (myst's processHtmlClass)
    mj = dict(config.mathjax3_config or {})
    loader = dict(mj.get("loader", {}))
    loader["load"] = list(dict.fromkeys([*loader.get("load", []), *LOAD]))
    mj["loader"] = loader
    config.mathjax3_config = mj


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", configure, priority=900)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
