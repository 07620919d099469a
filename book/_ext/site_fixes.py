"""Browser-level fixes for the site (found by tests/test_browser_site.py).

* Sphinx 7.4 emits body-only ``<script>`` tags that extensions register after the
  builder starts twice (once with filename None, once with ''): sphinx-thebe's
  ``const THEBE_JS_URL = ...`` then throws "Identifier 'THEBE_JS_URL' has already
  been declared" on every page. Keep the first of identical scripts.
* Long inline code (``torch.nn.functional.scaled_dot_product_attention``) cannot
  wrap and makes pages scroll sideways on phones: let it break anywhere.
"""

from pathlib import Path

from sphinx.application import Sphinx

CSS = "site-fixes.css"
CSS_TEXT = "code.literal span.pre { white-space: pre-wrap; overflow-wrap: anywhere; }\n"


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (script.filename or "", tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def write_css(app: Sphinx, exc) -> None:
    if exc is None and app.builder.format == "html":
        target = Path(app.outdir) / "_static" / CSS
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(CSS_TEXT)


def setup(app: Sphinx) -> dict:
    app.add_css_file(CSS)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("build-finished", write_css)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
