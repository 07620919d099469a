"""Offer every chapter's notebook as an ``.ipynb`` download.

Chapters are MyST Markdown notebooks; the site's download menu (from
sphinx-book-theme) gets an ``.ipynb`` entry when the page context names an
``ipynb_source``. This extension converts each notebook page with jupytext into
``_sources/<page>.ipynb`` -- without outputs, ready to run cell by cell -- and
sets that context value.
"""

from pathlib import Path

import jupytext
from sphinx.application import Sphinx


def is_notebook_page(app: Sphinx, pagename: str) -> Path | None:
    """The source file of ``pagename`` if it is a notebook (has a kernelspec)."""
    if pagename not in app.env.found_docs:
        return None
    source = Path(app.env.doc2path(pagename))
    if source.suffix == ".ipynb":
        return source
    if source.suffix == ".md" and "kernelspec" in app.env.metadata.get(pagename, {}):
        return source
    return None


def add_ipynb(app: Sphinx, pagename, templatename, context, doctree) -> None:
    source = is_notebook_page(app, pagename)
    if source is None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = jupytext.read(source)
    notebook.metadata.pop("jupytext", None)
    jupytext.write(notebook, target, fmt="ipynb")
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Sphinx) -> dict:
    # Before sphinx-book-theme builds its header buttons (default priority 500).
    app.connect("html-page-context", add_ipynb, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
