"""Browser-level fixes for the site (found by tests/test_browser_site.py).

* Sphinx 7.4 emits body-only ``<script>`` tags that extensions register after the
  builder starts twice (once with filename None, once with ''): sphinx-thebe's
  ``const THEBE_JS_URL = ...`` then throws "Identifier 'THEBE_JS_URL' has already
  been declared" on every page. Keep the first of identical scripts.
* Long inline code (``torch.nn.functional.scaled_dot_product_attention``) cannot
  wrap and makes pages scroll sideways on phones: let it break anywhere.
* Page weight: pydata-sphinx-theme loads ``fontawesome.js`` (1.49 MB, every icon
  of Font Awesome as SVG+JS) on every page for a dozen icons. Its stylesheet
  already carries Font Awesome's CSS and ``@font-face`` webfonts, which draw the
  same ``<i class="fa-solid fa-sun">`` icons, so the script is dropped from every
  page (and from ``_static``), and the three webfonts (300 kB) are replaced by
  WOFF subsets holding only the icons the site's pages and scripts name (a few
  kB): after the build, ``@font-face`` in the theme's CSS points at them.
"""

import os
import re
from pathlib import Path

from sphinx.application import Sphinx

CSS = "site-fixes.css"
FA_SCRIPT = re.compile(
    r'[ \t]*<script[^>]*src="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*>'
    r"\s*</script>\n?"
)
THEME_CSS = "styles/pydata-sphinx-theme.css"  # below _static/
FA_FACE = re.compile(
    r"@font-face\{(?P<body>[^}]*?font-family:\s*\"?Font Awesome[^}]*?)"
    r"src:(?P<src>[^;}]*)(?P<rest>[^}]*)\}"
)
FA_URL = re.compile(r"url\(([^)]*webfonts/(fa-[a-z]+-\d+)\.woff2)\)")
SUBSETS = "fa-subset"  # below _static/
ALWAYS = {"fa-xmark"}  # added by pydata-sphinx-theme.js (search dialog)
# Nothing scrolls sideways on a laptop. At 1280 px the theme's article column
# held 77 monospace characters; a narrower right-hand table of contents (13rem,
# not 17rem) and code at 13 px make it ~90, so every code cell (<= 79 by test)
# and the library source that show_source() prints (<= 88, ruff) fit. Printed
# output longer than that wraps instead of scrolling.
# The language switch (language_switch.py) is a small bordered button that sits on
# the line of the header's icon buttons.
CSS_TEXT = """\
code.literal span.pre { white-space: pre-wrap; overflow-wrap: anywhere; }
:root { --pst-sidebar-secondary: 13rem; }
div.cell div.highlight pre, div.cell_output pre { font-size: 13px; }
div.cell_output pre { white-space: pre-wrap; overflow-wrap: anywhere; }
.header-article-items__end { display: flex; align-items: center; }
.bd-header-article a.language-switch { font-size: .8rem; font-weight: 600;
  padding: .05rem .45rem; margin-right: .25rem; line-height: 1.5;
  border: 1px solid var(--pst-color-border); border-radius: .25rem; }
"""


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


def icon_codepoints(css: str) -> dict[str, int]:
    """``fa-name`` -> code point, from rules like ``.fa-sun:before{content:"\\f185"}``
    (several selectors may share one rule)."""
    found = {}
    for selectors, code in re.findall(
        r"((?:\.fa-[a-z0-9-]+:before,?)+)\{content:\"\\([0-9a-f]{2,5})\"\}", css
    ):
        for name in re.findall(r"\.(fa-[a-z0-9-]+):before", selectors):
            found[name] = int(code, 16)
    return found


def used_icons(outdir: Path) -> set[str]:
    """Every ``fa-*`` name in the site's pages and scripts."""
    names = set(ALWAYS)
    for path in [*outdir.rglob("*.html"), *(outdir / "_static").rglob("*.js")]:
        names.update(re.findall(r"\bfa-[a-z0-9-]+", path.read_text(errors="ignore")))
    return names


PUA = re.compile(r"\\(e[0-9a-f]{3}|f[0-9a-f]{3})\b|([\ue000-\uf8ff])", re.I)


def css_codepoints(outdir: Path) -> set[int]:
    """Icons the stylesheets draw themselves, not by an ``fa-*`` class: the
    admonition, dropdown and toggle icons (``--pst-icon-note: "\uf0f3"``,
    ``content: "\\f107"``). The ``.fa-name:before`` table is left out: those
    icons count only when a page or script names them (``used_icons``)."""
    table = re.compile(r"(?:\.fa-[a-z0-9-]+:before,?)+\{content:\"[^\"]*\"\}")
    found = set()
    for path in (outdir / "_static").rglob("*.css"):
        css = table.sub("", path.read_text(encoding="utf-8", errors="ignore"))
        for escape, char in PUA.findall(css):
            found.add(int(escape, 16) if escape else ord(char))
    return found


def subset_font(source: Path, codepoints: set[int], target: Path) -> None:
    from fontTools import subset
    from fontTools.ttLib import TTFont

    font = TTFont(str(source))
    options = subset.Options(flavor="woff", layout_features=["*"])
    options.notdef_outline = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(codepoints))
    subsetter.subset(font)
    font.flavor = "woff"
    font.save(str(target))


def slim_font_awesome(outdir: Path) -> None:
    """Drop fontawesome.js; serve subset webfonts (see the module docstring)."""
    for page in outdir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        slim = FA_SCRIPT.sub("", text)
        if slim != text:
            page.write_text(slim, encoding="utf-8")
    scripts = outdir / "_static" / "scripts"
    for leftover in scripts.glob("fontawesome.js*"):
        leftover.unlink()
    css_path = outdir / "_static" / THEME_CSS
    if not css_path.is_file():
        return
    css = css_path.read_text(encoding="utf-8")
    table = icon_codepoints(css)
    codepoints = {table[name] for name in used_icons(outdir) if name in table}
    codepoints |= css_codepoints(outdir)
    folder = outdir / "_static" / SUBSETS
    folder.mkdir(exist_ok=True)

    def point_at_subset(face: re.Match) -> str:
        woff2 = FA_URL.search(face["src"])
        if woff2 is None:
            return face[0]
        # the .ttf twin: reading woff2 would need brotli, which is not installed
        source = (css_path.parent / woff2[1].strip("'\"")).with_suffix(".ttf")
        if not source.is_file():
            return face[0]
        subset_font(source, codepoints, folder / f"{woff2[2]}.woff")
        src = f'url(../{SUBSETS}/{woff2[2]}.woff) format("woff")'
        return f"@font-face{{{face['body']}src:{src}{face['rest']}}}"

    slimmer = FA_FACE.sub(point_at_subset, css)
    if slimmer != css:
        css_path.write_text(slimmer, encoding="utf-8")


def finish(app: Sphinx, exc) -> None:
    if exc is None and app.builder.format == "html":
        slim_font_awesome(Path(app.outdir))


def setup(app: Sphinx) -> dict:
    # Kernels that myst-nb starts on a cache miss inherit this: attncourse's
    # tqdm bars belong in JupyterLab, not in the built page (execute_parallel.py
    # sets the same for the kernels it starts).
    os.environ["ATTNCOURSE_PROGRESS"] = "0"
    app.add_css_file(CSS)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("build-finished", write_css)
    app.connect("build-finished", finish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
