"""A language switch in every page header: English <-> 中文.

The English site is ``_build/html/<page>.html``; the Chinese edition
(``book/_ext/zh_edition.py``) has the same page names below ``_build/html/zh/``.
Each page's header gets a link to its counterpart in the other edition, written
relative to the page so the site works from any folder and offline, plus
``<link rel="alternate" hreflang>`` tags naming both editions. ``language_switch_
edition`` is "" for the English build and "zh" for the Chinese one.
"""

from pathlib import Path

from sphinx.application import Sphinx

TEMPLATE = "language-switch.html"
# the edition being built -> (the other edition's hreflang, the button, its title)
LABELS = {
    "": ("zh-CN", "中文", "阅读中文版"),
    "zh": ("en", "English", "Read this page in English"),
}
# The theme's own words on the Chinese pages: its zh_CN catalogue has Taiwan's
# 列印 for "print", and the search box's placeholder is not translated at all.
SEARCH_TEXT = {"zh": "搜索本书……"}
UI_WORDS = {"zh": {"列印成 PDF": "打印为 PDF"}}


def edition_links(pagename: str, edition: str) -> dict[str, str]:
    """hreflang -> this page in that edition, relative to this page's HTML file."""
    here = pagename.rsplit("/", 1)[-1] + ".html"
    up = "../" * pagename.count("/")
    if edition:
        return {"en": f"{up}../{pagename}.html", "zh-CN": here}
    return {"en": here, "zh-CN": f"{up}zh/{pagename}.html"}


def add_switch(app: Sphinx, pagename, templatename, context, doctree) -> None:
    edition = app.config.language_switch_edition
    if edition not in LABELS:
        raise ValueError(
            f"language_switch_edition must be one of {sorted(LABELS)}, not {edition!r}"
        )
    lang, label, title = LABELS[edition]
    links = edition_links(pagename, edition)
    context["language_switch"] = {
        "href": links[lang],
        "lang": lang,
        "label": label,
        "title": title,
    }
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<link rel="alternate" hreflang="{code}" href="{href}" />'
        for code, href in links.items()
    )


def configure(app: Sphinx, config) -> None:
    templates = str(Path(__file__).resolve().parent.parent / "_templates")
    if templates not in config.templates_path:
        config.templates_path.append(templates)
    options = config.html_theme_options
    edition = config.language_switch_edition
    if edition in SEARCH_TEXT:
        options.setdefault("search_bar_text", SEARCH_TEXT[edition])
    end = list(options.get("article_header_end") or ["article-header-buttons.html"])
    if TEMPLATE not in end:
        options["article_header_end"] = [TEMPLATE] + end


def fix_ui_words(app: Sphinx, exc) -> None:
    """Replace the theme's words listed in UI_WORDS in every page written."""
    words = UI_WORDS.get(app.config.language_switch_edition)
    if exc is not None or not words or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = text
        for old, new in words.items():
            fixed = fixed.replace(old, new)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.add_config_value("language_switch_edition", "", "html", types=[str])
    app.connect("config-inited", configure)
    app.connect("html-page-context", add_switch)
    app.connect("build-finished", fix_ui_words)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
