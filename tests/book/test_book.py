"""Build the whole book from scratch, executing every chapter, and check the site.

The build goes to a fresh folder, so the execution cache is empty and every
notebook runs. It is the slowest test; `make test-fast` skips it.
"""

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
from bs4 import BeautifulSoup
from support.book import FRAMEWORK_TAGS, chapters, code_cells, source_path

pytestmark = pytest.mark.book

EXTERNAL = re.compile(r"^(https?:)?//", re.I)


def pages(site: Path) -> list[Path]:
    return [site / f"{doc}.html" for doc in ["book/index", *chapters()]]


def soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def test_every_page_built(site):
    for page in pages(site):
        assert page.exists(), f"{page} was not built"


def external_loads(doc: BeautifulSoup) -> list[str]:
    """URLs the page would *load* (scripts, styles, images, frames) off-site."""
    found = []
    for tag, attr in (
        ("script", "src"),
        ("img", "src"),
        ("iframe", "src"),
        ("source", "src"),
        ("video", "src"),
        ("audio", "src"),
        ("embed", "src"),
        ("object", "data"),
    ):
        for node in doc.find_all(tag):
            url = node.get(attr) or ""
            if EXTERNAL.match(url):
                found.append(f"<{tag} {attr}={url}>")
    for node in doc.find_all("link"):
        rel = {r.lower() for r in node.get("rel", [])}
        if rel & {
            "stylesheet",
            "preload",
            "icon",
            "modulepreload",
            "prefetch",
            "manifest",
        } and EXTERNAL.match(node.get("href") or ""):
            found.append(f"<link rel={sorted(rel)} href={node['href']}>")
    for node in doc.find_all(style=True):
        found += [
            u
            for u in re.findall(r"url\(([^)]+)\)", node["style"])
            if EXTERNAL.match(u.strip("'\" "))
        ]
    for node in doc.find_all("style"):
        found += [
            u
            for u in re.findall(r"url\(([^)]+)\)", node.get_text())
            if EXTERNAL.match(u.strip("'\" "))
        ]
    return found


def test_site_loads_nothing_from_the_network(site):
    problems = {}
    for page in site.rglob("*.html"):
        bad = external_loads(soup(page))
        if bad:
            problems[str(page.relative_to(site))] = bad
    for css in site.rglob("*.css"):
        urls = re.findall(
            r"url\(\s*['\"]?((?:https?:)?//[^'\")]+)", css.read_text(errors="ignore")
        )
        if urls:
            problems[str(css.relative_to(site))] = urls
    for js in (site / "_static").glob("*.js"):
        # Scripts that fetch code from a CDN at load time (require.js, thebe).
        text = js.read_text(errors="ignore")
        if re.search(r"cdn\.jsdelivr|cdnjs\.cloudflare|unpkg\.com", text) and (
            js.name not in {"sphinx-thebe.js"}
        ):
            problems[str(js.relative_to(site))] = ["CDN URL in script"]
    assert not problems, json.dumps(problems, indent=1)[:4000]


def test_mathjax_is_served_locally(site):
    page = soup(site / "book" / "addressing.html")
    sources = [s.get("src", "") for s in page.find_all("script")]
    mathjax = [s for s in sources if "mathjax" in s.lower()]
    assert mathjax and all(not EXTERNAL.match(s) for s in mathjax), sources
    local = (site / "book" / mathjax[0]).resolve()
    # startup.js (the loader; offline_assets.py), or a combined component
    assert local.is_file() and local.stat().st_size > 20_000
    fonts = list(
        (site / "_static" / "mathjax" / "output" / "chtml" / "fonts").rglob("*.woff")
    )
    assert fonts, "MathJax CHTML fonts were not copied"
    assert page.select("div.math"), "no display math on the addressing page"


@pytest.mark.parametrize("doc", chapters())
def test_framework_tabs_hold_code_and_outputs(site, doc):
    page = soup(site / f"{doc}.html")
    tab_sets = page.select("div.sd-tab-set.framework-tabs")
    cells = code_cells(source_path(doc))
    tagged = [t for t, _ in cells if set(t) & set(FRAMEWORK_TAGS)]
    if not tagged:
        pytest.skip(f"{doc} has no framework cells")
    assert tab_sets, f"{doc}: tagged cells but no tab set in the HTML"
    seen = with_outputs = 0
    for tab_set in tab_sets:
        labels = tab_set.find_all("label", class_="sd-tab-label", recursive=False)
        assert [lb.get("data-sync-id") for lb in labels] == list(FRAMEWORK_TAGS)
        assert {lb.get("data-sync-group") for lb in labels} == {"framework"}
        assert [lb.get_text(strip=True) for lb in labels] == ["TensorFlow", "PyTorch"]
        contents = tab_set.find_all("div", class_="sd-tab-content", recursive=False)
        assert len(contents) == 2
        for fw, content in zip(FRAMEWORK_TAGS, contents, strict=True):
            cells = content.select("div.cell")
            assert cells and all(f"tag_{fw}" in c["class"] for c in cells)
            seen += len(cells)
            assert content.select("div.cell_input"), "code missing from a tab"
        with_outputs += any(c.select("div.cell_output") for c in contents)
    # a tab set may only define things (a model in each framework); the outputs
    # of the tagged cells that print or plot are inside their tabs
    assert with_outputs, f"{doc}: no tab set shows an output"
    assert seen == len(tagged), f"{doc}: {len(tagged)} tagged cells, {seen} in tabs"


@pytest.mark.parametrize("doc", chapters())
def test_chapter_was_executed(site, doc):
    page = soup(site / f"{doc}.html")
    inputs = page.select("div.cell_input")
    outputs = page.select("div.cell_output")
    assert inputs and outputs, f"{doc} shows no executed outputs"
    assert not page.select("div.output.error, div.output.traceback"), (
        f"{doc} shows an error output"
    )
    for img in page.select("div.cell_output img"):
        path = (site / doc).parent / img["src"]
        assert path.is_file() and path.stat().st_size > 1000, img["src"]
    text = " ".join(o.get_text() for o in outputs)
    bar = re.search(r"\d+%\|[^|\n]*\|[^\n]*(?:it/s|s/it)", text)
    assert bar is None, f"{doc} shows a progress bar: {bar.group(0)!r}"


@pytest.mark.parametrize("doc", chapters())
def test_ipynb_download(site, doc):
    page = soup(site / f"{doc}.html")
    links = [
        a["href"] for a in page.find_all("a", href=True) if a["href"].endswith(".ipynb")
    ]
    assert links, f"{doc} offers no .ipynb download"
    target = (site / doc).parent / urlparse(links[0]).path
    nb = json.loads(target.read_text())
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(code) == len(code_cells(source_path(doc)))
    assert all(not c.get("outputs") for c in code)


def test_cjk_web_font_covers_the_sites_chinese(site):
    """Readers without a CJK system font still see 欢迎 来 北京, not boxes."""
    from fontTools.ttLib import TTFont

    english = [p for p in site.rglob("*.html") if p.relative_to(site).parts[0] != "zh"]
    text = "".join(p.read_text(encoding="utf-8") for p in english)
    used = {c for c in text if 0x4E00 <= ord(c) <= 0x9FFF}
    assert {"欢", "迎", "来", "北", "京"} <= used
    cmap = TTFont(site / "_static" / "cjk-subset.woff2").getBestCmap()
    missing = sorted(c for c in used if ord(c) not in cmap)
    assert not missing, f"characters without a glyph in the web font: {missing}"
    css = (site / "_static" / "cjk-webfont.css").read_text()
    assert "unicode-range" in css and "--pst-font-family-base: 'Course CJK'" in css


FIRST_LOAD_LIMIT = 3_000_000  # bytes: a page's first load with everything it pulls


def mathjax_first_load(site: Path) -> tuple[int, list[str]]:
    """Bytes MathJax fetches on a page with math, beyond its entry script: core,
    the components the pages' config loads (offline_assets.LOAD), CHTML's font
    data, and (an upper bound) every CHTML woff font."""
    import offline_assets  # book/_ext is on sys.path (support.book)

    root = site / "_static" / offline_assets.TARGET
    files = [root / "core.js", root / "output/chtml/fonts/tex.js"]
    files += [root / f"{name}.js" for name in offline_assets.LOAD]
    files += sorted((root / "output/chtml/fonts").rglob("*.woff"))
    missing = [str(f.relative_to(site)) for f in files if not f.is_file()]
    return sum(f.stat().st_size for f in files if f.is_file()), missing


def test_every_page_first_load_is_at_most_3_mb(site):
    """HTML + images + stylesheets (and their @imports) + scripts + every
    @font-face font those stylesheets declare (counted whether used or not) +
    what MathJax loads by itself, as bench/book_build.py measures it: <= 3 MB.
    The browser's own count is in test_browser_site.py
    (test_page_loads_offline_with_figures_in_3_mb)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import measure

    weights = measure.site_weights(site)
    extra, missing = mathjax_first_load(site)
    assert not missing, f"MathJax parts the pages load are missing: {missing}"
    heavy = {}
    for page in weights["pages"]:
        assert not page["missing"], f"{page['page']} loads missing files"
        total = page["total_bytes"] + (extra if page["loads_mathjax"] else 0)
        if total > FIRST_LOAD_LIMIT:
            heavy[page["page"]] = {
                "total": total,
                **{k: v for k, v in page.items() if k.endswith("_bytes")},
            }
    assert weights["pages"], "no pages measured"
    assert not heavy, json.dumps(heavy, indent=1)
    scripts = [a["file"] for a in weights["assets"] if "fontawesome" in a["file"]]
    assert not scripts, f"pages still load Font Awesome's JS: {scripts}"


def test_icon_subsets_hold_every_icon_the_stylesheets_draw(site):
    """The admonition, dropdown and toggle icons come from CSS (``content``, the
    theme's ``--pst-icon-*`` variables), not from an ``fa-*`` class in a page:
    the Font Awesome subsets must still hold them (they once rendered as boxes)."""
    from fontTools.ttLib import TTFont

    sys.path.insert(0, str(Path(__file__).parents[2] / "book" / "_ext"))
    import site_fixes

    drawn = site_fixes.css_codepoints(site)
    assert 0xF0EB in drawn, "the tip admonition's lightbulb is not found in the CSS"
    subsets = sorted((site / "_static" / site_fixes.SUBSETS).glob("*.woff"))
    assert len(subsets) == 3, subsets  # solid, regular, brands
    held = set().union(*(TTFont(str(f)).getBestCmap() for f in subsets))
    missing = sorted(hex(c) for c in drawn - held)
    assert not missing, f"icons the CSS draws but the subset lacks: {missing}"
