"""Serve a small Chinese web font so the site's own text shows 欢迎 来 北京 offline.

Readers on minimal systems (no CJK system font) would see empty boxes for the
Chinese in the prose, the glossary and code strings. After the HTML is written,
this extension collects every CJK character the site uses, subsets the Simplified
Chinese face of Noto Sans CJK (shipped by the pinned PyPI package
``noto-cjk-sans-otc``, SIL OFL) to exactly those glyphs, and serves it as a web
font that heads the theme's font stacks, limited by ``unicode-range`` to
CJK code points. A few dozen characters cost a few tens of kilobytes; the
Chinese edition (``_build/html/zh/``, built by ``zh_edition.py`` with its own
font) uses a few thousand and is served as WOFF2 (Brotli), which is smaller.
The English build skips ``zh/`` when it counts characters.

Emphasis: Chinese has no italic. A browser slants CJK glyphs synthetically, and the
slanted character leans into the next one, so emphasis whose text is Chinese
(``*软*寻址``) is marked ``em.cjk`` by a transform and shown upright with emphasis
dots under the characters (着重号, as Chinese typography does; the W3C's
"Requirements for Chinese Text Layout" §3.2), in both editions. Emphasis of Latin
text keeps its italics.
"""

import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform

CSS = "cjk-webfont.css"
FONT = "cjk-subset.woff2"
FAMILY = "Course CJK"
SC_FACE = 2  # Noto Sans CJK SC inside the collection
CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")
RANGES = "U+3000-303F, U+3400-4DBF, U+4E00-9FFF, U+FF00-FFEF"
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
EMPHASIS_CLASS = "cjk"
# upright, with a dot under each character (Latin letters inside get none)
EMPHASIS_CSS = (
    f"em.{EMPHASIS_CLASS} {{ font-style: normal; font-synthesis: none;"
    " text-emphasis: filled dot; -webkit-text-emphasis: filled dot;"
    " text-emphasis-position: under right;"
    " -webkit-text-emphasis-position: under right; }\n"
    f"em.{EMPHASIS_CLASS} code, em.{EMPHASIS_CLASS} .math"
    " { text-emphasis: none; -webkit-text-emphasis: none; }\n"
)


class CJKEmphasis(SphinxTransform):
    """Mark emphasis whose text has a Chinese character (see the module doc)."""

    default_priority = 800

    def apply(self, **kwargs) -> None:
        for node in self.document.findall(nodes.emphasis):
            if HAN.search(node.astext()) and EMPHASIS_CLASS not in node["classes"]:
                node["classes"].append(EMPHASIS_CLASS)


def used_characters(outdir: Path) -> set[str]:
    chars: set[str] = set()
    for page in outdir.rglob("*.html"):
        if page.relative_to(outdir).parts[0] == "zh":  # the Chinese edition's own
            continue
        chars.update(CJK.findall(page.read_text(encoding="utf-8", errors="ignore")))
    return chars


def write_font(chars: set[str], target: Path) -> None:
    import noto_cjk_sans_otc
    from fontTools import subset
    from fontTools.ttLib import TTFont

    font = TTFont(str(noto_cjk_sans_otc.FONT_PATH), fontNumber=SC_FACE, lazy=False)
    # no hints (browsers on high-resolution screens do without them) and flat
    # charstrings, which WOFF2 compresses better: a fifth smaller
    options = subset.Options(
        flavor="woff2", layout_features=["*"], hinting=False, desubroutinize=True
    )
    subsetter = subset.Subsetter(options)
    subsetter.populate(text="".join(sorted(chars)))
    subsetter.subset(font)
    font.flavor = "woff2"
    font.save(str(target))


def css_text() -> str:
    """@font-face plus the theme's font stacks (pydata and Bootstrap variables)
    with the subset put first. Its ``unicode-range`` covers only CJK, so Latin
    text still gets the theme's fonts. (Last would not work: Chromium resolves a
    generic family such as ``sans-serif`` through the system and never reaches
    fonts listed after it for characters the system lacks.)"""
    stacks = {
        "--bs-font-sans-serif": "system-ui, -apple-system, 'Segoe UI', Roboto, "
        "'Helvetica Neue', 'Noto Sans', 'Liberation Sans', Arial, sans-serif",
        "--bs-font-monospace": "SFMono-Regular, Menlo, Monaco, Consolas, "
        "'Liberation Mono', 'Courier New', monospace",
        "--pst-font-family-base": "var(--pst-font-family-base-system)",
        "--pst-font-family-heading": "var(--pst-font-family-base-system)",
        "--pst-font-family-monospace": "var(--pst-font-family-monospace-system)",
    }
    rules = "".join(f"  {var}: '{FAMILY}', {stack};\n" for var, stack in stacks.items())
    return (
        f"@font-face {{ font-family: '{FAMILY}'; src: url('{FONT}') format('woff2');"
        f" unicode-range: {RANGES}; font-display: swap; }}\n"
        f":root {{\n{rules}}}\n"
    )


def finish(app: Sphinx, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    chars = used_characters(Path(app.outdir))
    if chars:
        write_font(chars, static / FONT)
    (static / CSS).write_text((css_text() if chars else "") + EMPHASIS_CSS)


def setup(app: Sphinx) -> dict:
    app.add_css_file(CSS)
    app.add_transform(CJKEmphasis)
    app.connect("build-finished", finish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
