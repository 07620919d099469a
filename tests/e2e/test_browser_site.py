"""The built site in a real browser: headless Chromium over http on 127.0.0.1.

tests/test_book.py checks the HTML files; these tests check what a reader gets:
pages that load without errors and without the network, typeset math, synced
and remembered framework tabs, figures, search, the .ipynb download, dark mode,
and layouts that fit a phone. The book is the session's shared build (the
``site`` fixture); screenshots go to ``_build/browser-artifacts/screenshots/``.
"""

import json
import re
from pathlib import Path

import pytest

pytest.register_assert_rewrite("browser")  # before the import below

from support.book import chapters, code_cells, source_path, toc_files  # noqa: E402
from support.browser import (  # noqa: E402
    DESKTOP,
    PHONE,
    SCREENSHOTS,
    assert_clean,
    load,
    safe_name,
    skip_without_browser,
    wait_until_settled,
)

# `book` too: these tests need the executed build (`make test-fast` skips them).
pytestmark = [pytest.mark.browser, pytest.mark.book, *skip_without_browser()]

DOCS = toc_files()
CHAPTERS = chapters()
FRAMEWORKS = ("tensorflow", "pytorch")
# the English site and the Chinese edition below it (book/_ext/zh_edition.py)
EDITIONS = pytest.mark.parametrize("edition", ["", "zh/"], ids=["en", "zh"])


def title_of(doc: str) -> str:
    found = re.search(r"^# (.+)$", source_path(doc).read_text(), re.M)
    return found.group(1) if found else ""


def search_cases() -> list[tuple[str, str, str | None]]:
    """(edition, term, chapter the results must include): always "attention";
    "multi-head" once a chapter on it exists; on the Chinese edition 注意力 and
    多头注意力 (Sphinx's Chinese search cuts words with jieba and the glossary's
    terms)."""
    cases: list[tuple[str, str, str | None]] = [("", "attention", None)]
    multihead = [
        d for d in CHAPTERS if re.search(r"multi.?head", f"{d} {title_of(d)}", re.I)
    ]
    if multihead:
        cases.append(("", "multi-head", multihead[0]))
    cases += [("zh/", "注意力", "book/addressing")]
    if multihead:
        cases.append(("zh/", "多头注意力", multihead[0]))
    return cases


def open_page(web, site_url: str, doc: str, query: str = ""):
    response = load(web, f"{site_url}/{doc}.html{query}")
    assert response is not None, f"{doc}: no response"
    assert response.ok, f"{doc}: HTTP {response.status}"
    return web.page


def pages_with_tabs(site) -> list[str]:
    return [
        doc
        for doc in DOCS
        if "framework-tabs" in (site / f"{doc}.html").read_text(encoding="utf-8")
    ]


def figure_problems(page, doc: str) -> list[str]:
    """Every image in a cell output loaded; a chapter that draws shows figures;
    no figure lost its CJK glyphs (matplotlib's "missing from font" warning)."""
    images = page.evaluate(
        """() => [...document.querySelectorAll('.cell_output img')].map(img => ({
             src: img.getAttribute('src'), complete: img.complete,
             width: img.naturalWidth, height: img.naturalHeight,
             shown: img.checkVisibility(),
             box: img.checkVisibility() ? img.getBoundingClientRect().width
                                        : null}))"""
    )
    problems = []
    plots = [
        code
        for _, code in code_cells(source_path(doc))
        if re.search(r"plt\.show\(|show_heatmaps\(", code)
    ]
    if plots and not images:
        problems.append(
            f"{len(plots)} cells draw figures but the page shows no image (was the "
            "book built with a non-inline matplotlib backend, e.g. MPLBACKEND=Agg "
            "exported by the Makefile?)"
        )
    problems += [
        f"image did not load: {i}"
        for i in images
        if not (i["complete"] and i["width"] > 0 and i["height"] > 0)
    ]
    problems += [
        f"visible image drawn with zero width: {i}"
        for i in images
        if i["shown"] and not i["box"]
    ]
    tofu = page.locator(".cell_output .stderr").filter(has_text="missing from font")
    if tofu.count():
        problems.append(
            "matplotlib lacks glyphs (CJK labels drawn as boxes): "
            + (tofu.first.text_content() or "")[:300]
        )
    return problems


FIRST_LOAD_LIMIT = 3_000_000


def first_load_problems(page, site_url: str, doc: str) -> list[str]:
    """Everything the browser fetched for this fresh visit without interaction (the
    page, its CSS, JS, fonts, images, MathJax's components and fonts), summed from
    the Resource Timing API: <= 3 MB, every file of the site sized."""
    got = page.evaluate(
        """() => {
          const nav = performance.getEntriesByType('navigation')[0];
          const res = performance.getEntriesByType('resource');
          return {page: nav.encodedBodySize,
                  // the browser asks for /favicon.ico; the site has none (404)
                  files: res.filter(r => !r.name.endsWith('/favicon.ico'))
                            .map(r => [r.name, r.encodedBodySize, r.initiatorType]),
                  full: performance.getEntriesByType('resource').length >= 250};
        }"""
    )
    if got["full"]:
        return ["the resource timing buffer filled up: the count is short"]
    total = got["page"] + sum(size for _, size, _ in got["files"])
    biggest = sorted(got["files"], key=lambda f: -f[1])[:8]
    print(f"\n{doc}: first load {total / 1e6:.2f} MB ({len(got['files'])} files)")
    unsized = [n for n, size, _ in got["files"] if n.startswith(site_url) and not size]
    problems = []
    if not got["page"] or unsized:
        problems.append(f"files without a size: {unsized or 'the page'}")
    if total > FIRST_LOAD_LIMIT:
        problems.append(f"first load {total / 1e6:.2f} MB > 3 MB; largest: {biggest}")
    return problems


# ---------------------------------------------------------------------------


@EDITIONS
@pytest.mark.parametrize("doc", DOCS)
def test_page_loads_offline_with_figures_in_3_mb(web, site_url, doc, edition):
    """A fresh visit (``web`` is a new browser context, its cache empty): the page
    and its figures load from the site alone, in its language, with no console
    error, and all it fetches weighs <= 3 MB."""
    page = open_page(web, site_url, edition + doc)
    page.wait_for_load_state("networkidle")
    assert page.locator("main, article").first.inner_text().strip(), f"{doc} is empty"
    lang = page.locator("html").get_attribute("lang") or ""
    assert lang.startswith("zh" if edition else "en"), f"{edition}{doc}: lang={lang!r}"
    assert any(f"{site_url}/{edition}_static/" in r for r in web.log.requests), (
        "the page loaded none of the site's own assets"
    )
    problems = web.log.problems()
    figures = figure_problems(page, doc)
    if figures:
        problems["figures"] = figures
    weight = first_load_problems(page, site_url, edition + doc)
    if weight:
        problems["first load"] = weight
    assert not problems, f"{doc}:\n" + json.dumps(problems, indent=1)[:6000]


def test_site_root_redirects_to_the_first_page(web, site_url):
    with web.log.loading():
        web.page.goto(f"{site_url}/")
        web.page.wait_for_url(re.compile(re.escape(DOCS[0]) + r"\.html"))
        wait_until_settled(web.page)
    assert_clean(web, "site root", loads=False)


@EDITIONS
def test_math_is_typeset_by_mathjax(web, site_url, edition):
    with_math = [d for d in CHAPTERS if "$" in source_path(d).read_text()]
    doc = "book/addressing" if "book/addressing" in with_math else with_math[0]
    doc = edition + doc
    page = open_page(web, site_url, doc)
    report = page.evaluate(
        r"""() => {
          const math = [...document.querySelectorAll('.math')];
          const untypeset = math.filter(m => !m.querySelector('mjx-container'))
                                .map(m => m.textContent.slice(0, 80));
          const shown = [...document.querySelectorAll('mjx-container')]
            .filter(c => c.checkVisibility() && c.getBoundingClientRect().width > 0);
          const raw = [];
          const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
          for (let node = walk.nextNode(); node; node = walk.nextNode()) {
            const parent = node.parentElement;
            if (!parent || parent.closest(
                  'pre, code, script, style, textarea, mjx-container, .highlight'))
              continue;
            if (!parent.checkVisibility()) continue;
            const hit = node.textContent.match(
              /.{0,30}(\$\$|\\frac|\\\(|\\\[|\\begin\{).{0,30}/s);
            if (hit) raw.push(hit[0]);
          }
          return {math: math.length, untypeset, shown: shown.length, raw,
                  containers: document.querySelectorAll('mjx-container').length};
        }"""
    )
    assert report["containers"] > 0, f"{doc}: no mjx-container, MathJax did not run"
    assert report["math"] > 0 and not report["untypeset"], (
        f"{doc}: math left for MathJax but not typeset: {report['untypeset'][:5]}"
    )
    assert report["shown"] > 0, f"{doc}: typeset math has no visible size"
    assert not report["raw"], f"{doc}: raw TeX in visible text: {report['raw'][:5]}"
    assert_clean(web, doc, loads=False)


TAB_STATE = """() => [...document.querySelectorAll('div.sd-tab-set.framework-tabs')]
  .map(set => {
    const checked = [...set.querySelectorAll(':scope > input')].find(i => i.checked);
    const label = checked ? checked.nextElementSibling : null;
    const shown = [...set.querySelectorAll(':scope > .sd-tab-content')]
      .filter(c => c.checkVisibility())
      .map(c => c.previousElementSibling.dataset.syncId);
    return {checked: label ? label.dataset.syncId : null, shown};
  })"""


def assert_all_tabs(page, framework: str, where: str) -> None:
    state = page.evaluate(TAB_STATE)
    assert state, f"{where}: no framework tab sets"
    wrong = [
        (i, s)
        for i, s in enumerate(state)
        if s["checked"] != framework or s["shown"] != [framework]
    ]
    assert not wrong, (
        f"{where}: expected every tab set on {framework}; "
        f"{len(wrong)} of {len(state)} are not (index, state): {wrong[:5]}"
    )


def assert_outputs_follow(page, framework: str, where: str) -> None:
    """Outputs of the chosen framework are visible, the other's hidden."""
    other = next(f for f in FRAMEWORKS if f != framework)
    shown = hidden = 0
    for tab_set in page.locator("div.sd-tab-set.framework-tabs").all():
        for fw, want in ((framework, True), (other, False)):
            outputs = tab_set.locator(
                f':scope > label[data-sync-id="{fw}"] + .sd-tab-content .cell_output'
            )
            if outputs.count():
                assert outputs.first.is_visible() is want, (
                    f"{where}: a {fw} output is {'hidden' if want else 'visible'}"
                )
                shown += want
                hidden += not want
    assert shown, f"{where}: no visible output inside a {framework} tab"


@EDITIONS
def test_framework_tabs_sync_across_the_page_and_pages(
    new_web, site, site_url, edition
):
    tabbed = [edition + doc for doc in pages_with_tabs(site)]
    assert tabbed, "no page of the book has framework tabs"
    first = tabbed[0]
    second = tabbed[1] if len(tabbed) > 1 else None
    web = new_web()
    page = open_page(web, site_url, first)
    assert_all_tabs(page, "tensorflow", f"{first} before any click")

    # Click PyTorch on the *last* tab set: every other set must follow.
    label = page.locator("div.sd-tab-set.framework-tabs").last.locator(
        ':scope > label[data-sync-id="pytorch"]'
    )
    assert label.inner_text().strip() == "PyTorch"
    label.click()
    assert_all_tabs(page, "pytorch", f"{first} after clicking PyTorch")
    assert_outputs_follow(page, "pytorch", first)

    load(web)  # reload
    assert_all_tabs(page, "pytorch", f"{first} after reload")
    assert_outputs_follow(page, "pytorch", f"{first} after reload")

    if second is not None:
        page = open_page(web, site_url, second)
        assert_all_tabs(page, "pytorch", f"{second}, reached after choosing on {first}")
        assert_outputs_follow(page, "pytorch", second)
        # and back: choose TensorFlow on the second page, the first one follows
        page.locator("div.sd-tab-set.framework-tabs").first.locator(
            ':scope > label[data-sync-id="tensorflow"]'
        ).click()
        assert_all_tabs(page, "tensorflow", f"{second} after clicking TensorFlow")
        page = open_page(web, site_url, first)
        assert_all_tabs(page, "tensorflow", f"{first}, back from {second}")
    else:
        away = next(edition + d for d in DOCS if edition + d != first)
        open_page(web, site_url, away)
        page = open_page(web, site_url, first)
        assert_all_tabs(page, "pytorch", f"{first}, back from {away}")
    assert_clean(web, f"tabs on {first} / {second}", loads=False)


@pytest.mark.parametrize(
    ("edition", "term", "expected"),
    search_cases(),
    ids=[f"{e or 'en/'}{t}" for e, t, _ in search_cases()],
)
def test_search_finds(web, site_url, edition, term, expected):
    page = open_page(web, site_url, edition + "search", f"?q={term}")
    page.wait_for_function(
        """() => /found|did not match|搜索完成|没有匹配/i.test(document.querySelector(
             '#search-results .search-summary')?.innerText || '')""",
        timeout=20_000,
    )
    links = page.locator("#search-results ul.search > li a").evaluate_all(
        "links => links.map(a => a.href)"
    )
    summary = page.locator("#search-results .search-summary").inner_text()
    assert len(links) >= 1, f"search for {term!r} found nothing: {summary!r}"
    if expected is not None:
        assert any(f"/{edition}{expected}.html" in href for href in links), (
            f"search for {term!r} does not list {expected}: {links}"
        )
    edition_root = f"{site_url}/{edition}book/"
    assert all(href.startswith(edition_root) for href in links), (
        f"search on {edition or 'the English site'} lists other pages: {links}"
    )
    # a result is a working page of this site
    page.wait_for_load_state("networkidle")  # the result snippets
    with web.log.loading():
        page.locator("#search-results ul.search > li a").first.click()
        page.wait_for_load_state("load")
        wait_until_settled(page)
    assert page.url.startswith(site_url) and "search.html" not in page.url
    assert_clean(web, f"search {term!r}", loads=False)


@pytest.mark.parametrize("doc", CHAPTERS[:1])  # every chapter: test_book.py
def test_ipynb_download_gives_a_notebook(web, site_url, doc):
    page = open_page(web, site_url, doc)
    page.locator(".dropdown-download-buttons > button").click()
    link = page.locator('.dropdown-download-buttons a[href$=".ipynb"]')
    assert link.count() == 1, f"{doc}: {link.count()} .ipynb links in the download menu"
    link.wait_for(state="visible")
    href = link.evaluate("a => a.href")
    response = web.context.request.get(href)
    assert response.ok, f"{href}: HTTP {response.status}"
    nb = response.json()
    assert nb["nbformat"] == 4, nb.get("nbformat")
    assert nb["metadata"]["kernelspec"]["name"]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(code) == len(code_cells(source_path(doc))), f"{href}: code cells differ"
    assert_clean(web, doc, loads=False)


def test_dark_mode_toggle(web, site_url):
    page = open_page(web, site_url, CHAPTERS[0] if CHAPTERS else DOCS[0])
    theme = lambda: page.locator("html").get_attribute("data-theme")  # noqa: E731
    background = "getComputedStyle(document.body).backgroundColor"
    assert theme() == "light", "the reader's light color scheme was not followed"
    light_bg = page.evaluate(background)
    button = page.locator(".theme-switch-button").filter(visible=True).first
    for _ in range(3):  # the button cycles auto -> light -> dark
        if theme() == "dark":
            break
        button.click()
    assert theme() == "dark", f"data-theme is {theme()!r} after cycling the switch"
    page.wait_for_function(f"() => {background} !== {light_bg!r}")
    load(web)  # reload
    assert theme() == "dark", "dark mode was forgotten after reload"
    assert_clean(web, "dark mode", loads=False)


def screenshot_docs() -> list[str]:
    return CHAPTERS[:2] if len(CHAPTERS) >= 2 else [DOCS[0], *CHAPTERS[:1]]


@pytest.mark.parametrize("doc", screenshot_docs())
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_screenshot_and_no_horizontal_overflow(new_web, site_url, doc, viewport):
    width = viewport["width"]
    phone = width < 600
    web = new_web(viewport=viewport, is_mobile=phone, label=f"{width}px")
    page = open_page(web, site_url, doc)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{safe_name(doc)}-{width}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    # On a phone, Chromium widens the layout viewport (innerWidth) to fit content
    # that is too wide, so compare with the device width, not only innerWidth.
    sizes = page.evaluate(
        """(width) => {
          const past = e => e.getBoundingClientRect().right > width + 1;
          const clipped = e => {  // inside a scroll box / clip that itself fits
            for (let a = e.parentElement; a && a !== document.body;
                 a = a.parentElement) {
              const style = getComputedStyle(a);
              if (style.position === 'fixed') return true;
              if (style.overflowX !== 'visible' && !past(a)) return true;
            }
            return getComputedStyle(e).position === 'fixed';
          };
          const sticking = [...document.querySelectorAll('body *')].filter(e =>
            e.checkVisibility() && past(e) && !clipped(e)
            && !(e.parentElement && past(e.parentElement)));
          return {scroll: document.documentElement.scrollWidth,
                  inner: window.innerWidth,
                  wide: sticking.slice(0, 8).map(e => e.tagName.toLowerCase() + '.' +
                    [...e.classList].join('.') + ' in ' +
                    (e.parentElement.className || e.parentElement.tagName) + ' right=' +
                    Math.round(e.getBoundingClientRect().right) + 'px')};
        }""",
        width,
    )
    widest = sizes["wide"]
    assert sizes["scroll"] <= width + 1 and sizes["inner"] <= width + 1, (
        f"{doc} at {width}px scrolls sideways: scrollWidth {sizes['scroll']}, "
        f"innerWidth {sizes['inner']}; elements past the edge: {widest}"
    )
    assert_clean(web, f"{doc} at {width}px", loads=False)


# --------------------------------------------------------------------------
# diagrams (book/figures/*.svg) in light and dark mode, icons, page weight

FIGURE_DIRECTIVE = re.compile(r"^```\{figure\}\s+figures/([\w-]+\.svg)", re.M)


def figure_docs() -> list[str]:
    return [d for d in DOCS if FIGURE_DIRECTIVE.search(source_path(d).read_text())]


def test_some_pages_show_diagrams():
    """So the two tests below cannot pass by having nothing to check."""
    assert figure_docs(), "no page of the book shows a book/figures/*.svg diagram"


def luminance(rgb):
    """WCAG relative luminance of an (..., 3) array of 0-255 sRGB values."""
    import numpy as np

    c = np.asarray(rgb, float) / 255
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return c @ np.array([0.2126, 0.7152, 0.0722])


def figure_contrast(img) -> dict:
    """Card and ink luminance of a figure as the reader sees it (a screenshot of
    the <img>, theme filters included) and their WCAG contrast ratio."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(img.screenshot())).convert("RGB"))
    lum = luminance(pixels.reshape(-1, 3))
    card, ink = float(np.percentile(lum, 60)), float(np.percentile(lum, 0.5))
    return {"card": card, "ink": ink, "ratio": (card + 0.05) / (ink + 0.05)}


@pytest.mark.parametrize("doc", figure_docs() or ["(no page shows a diagram)"])
@pytest.mark.parametrize("mode", ["light", "dark"])
def test_diagrams_load_and_read_in_both_modes(new_web, site_url, doc, mode):
    assert doc in DOCS, doc
    wanted = FIGURE_DIRECTIVE.findall(source_path(doc).read_text())
    web = new_web(label=mode)
    web.page.emulate_media(color_scheme=mode)  # default_mode auto follows it
    page = open_page(web, site_url, doc)
    assert page.locator("html").get_attribute("data-theme") == mode
    background = luminance(
        page.evaluate(
            """() => getComputedStyle(document.body).backgroundColor
                 .match(/\\d+/g).slice(0, 3).map(Number)"""
        )
    )
    assert (background < 0.1) if mode == "dark" else (background > 0.8), background
    images = page.locator("article figure img, main figure img")
    shown = images.evaluate_all(
        """imgs => imgs.map(i => ({src: i.getAttribute('src'), ok: i.complete,
             width: i.naturalWidth, box: i.getBoundingClientRect().width}))"""
    )
    names = sorted(Path(i["src"]).name for i in shown if i["src"].endswith(".svg"))
    assert names == sorted(wanted), f"{doc}: figures shown {names}, wanted {wanted}"
    problems = [i for i in shown if not (i["ok"] and i["width"] > 0)]
    assert not problems, f"{doc} ({mode}): figures did not load: {problems}"
    narrow = [i for i in shown if i["box"] < 500]  # 1280 px window, width 100%
    assert not narrow, f"{doc} ({mode}): figures drawn too small: {narrow}"
    for index in range(images.count()):
        img = images.nth(index)
        img.scroll_into_view_if_needed()
        found = figure_contrast(img)
        where = f"{doc} ({mode}) {shown[index]['src']}: {found}"
        assert found["card"] > 0.5, f"the figure's background is dark: {where}"
        assert found["ratio"] >= 4.5, f"dark-on-dark or faint ink: {where}"
    assert_clean(web, f"{doc} in {mode} mode", loads=False)


def test_icons_render_without_font_awesome_js(web, site_url):
    """The theme's icons (search, theme switch, menus, download, arrows) come from
    the Font Awesome web font subset (site_fixes.py), not from fontawesome.js."""
    page = open_page(web, site_url, CHAPTERS[0] if CHAPTERS else DOCS[0])
    assert not [r for r in web.log.requests if "fontawesome" in r.lower()]
    icons = page.evaluate(
        """() => [...document.querySelectorAll('i[class*="fa-"], span[class*="fa-"]')]
          .filter(e => e.checkVisibility())
          .map(e => {
            const before = getComputedStyle(e, '::before');
            return {cls: e.className, content: before.content,
                    font: before.fontFamily, width: e.getBoundingClientRect().width};
          })"""
    )
    assert len(icons) >= 5, f"too few visible icons: {icons}"
    bad = [
        i
        for i in icons
        if i["content"] in ("none", "normal", '""')
        or "Font Awesome" not in i["font"]
        or i["width"] < 4
    ]
    assert not bad, f"icons without a glyph: {bad}"
    faces = page.evaluate(
        """() => [...document.fonts].filter(f => /Font Awesome/.test(f.family))
                   .filter(f => f.status === 'loaded').map(f => f.weight)"""
    )
    assert "900" in faces, f"the solid icon font did not load: {faces}"
    # the glyphs are real: the subset has the sun icon (theme switch)
    assert page.evaluate(
        """() => document.fonts.check('900 16px "Font Awesome 6 Free"', '\\uf185')"""
    )
    assert_clean(web, "icons", loads=False)


@pytest.mark.parametrize("doc", CHAPTERS)
def test_code_and_outputs_do_not_scroll_sideways_on_a_laptop(web, site_url, doc):
    """At 1280 px no code cell, printed output or display formula needs a
    horizontal scrollbar (the source test caps code at 79 characters; the
    site's CSS gives the column room for ~90 and wraps longer printed lines)."""
    page = open_page(web, site_url, doc)
    found = page.evaluate(
        """() => {
          const wide = e => e.scrollWidth > e.clientWidth + 1;
          const line = e => e.textContent.split('\\n')
              .reduce((a, l) => l.length > a.length ? l : a, '').slice(0, 120);
          const pick = sel => [...document.querySelectorAll(sel)].filter(wide);
          return {
            code: pick('div.cell_input pre').map(line),
            output: pick('div.cell_output pre').map(line),
            math: pick('mjx-container[display="true"]').map(e =>
                e.getAttribute('aria-label') || e.textContent.slice(0, 80)),
            cells: document.querySelectorAll('div.cell_input pre').length,
          };
        }"""
    )
    assert found["cells"] > 0, f"{doc}: no code cells found"
    for kind in ("code", "output", "math"):
        assert not found[kind], (
            f"{doc}: {kind} scrolls sideways at 1280 px: {found[kind]}"
        )


def test_language_switch_goes_to_the_same_page_and_back(new_web, site_url):
    """The header's switch leads to this page in the other edition (not its home
    page), and back; the framework chosen on one edition holds on the other."""
    doc = next(d for d in CHAPTERS if d != DOCS[0])
    web = new_web()
    page = open_page(web, site_url, doc)
    switch = page.locator("a.language-switch").filter(visible=True)
    assert switch.count() == 1 and switch.inner_text().strip() == "中文"
    page.locator(
        'div.sd-tab-set.framework-tabs > label[data-sync-id="pytorch"]'
    ).first.click()
    with web.log.loading():
        switch.click()
        page.wait_for_url(f"{site_url}/zh/{doc}.html")
        wait_until_settled(page)
    assert (page.locator("html").get_attribute("lang") or "").startswith("zh")
    assert page.locator("h1").first.inner_text().strip() != title_of(doc)
    assert_all_tabs(page, "pytorch", f"zh/{doc} after switching from English")
    back = page.locator("a.language-switch").filter(visible=True)
    assert back.inner_text().strip() == "English"
    with web.log.loading():
        back.click()
        page.wait_for_url(f"{site_url}/{doc}.html")
        wait_until_settled(page)
    assert (
        page.locator("h1")
        .first.inner_text()
        .strip()
        .startswith(title_of(doc).split("`")[0].strip()[:20])
    )
    assert_clean(web, f"language switch on {doc}", loads=False)
