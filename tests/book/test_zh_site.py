"""The built Chinese edition (``_build/html/zh``) beside the English site.

It is built by ``book/_ext/zh_edition.py`` from the English execution cache (the
``site`` fixture runs it after the English build, as ``make book`` does).
"""

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
import zh_edition  # book/_ext is on sys.path (support.book)
from bs4 import BeautifulSoup
from cjk_webfont import CJK  # the characters the web font is cut for
from support.book import ROOT, chapters, toc_files

pytestmark = pytest.mark.book


def soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def zh_site(site: Path) -> Path:
    return site / zh_edition.EDITION


def report_dir(site: Path) -> Path:
    return site.parent / "zh-report"


def test_every_page_has_a_chinese_page_in_chinese(site):
    for doc in toc_files():
        page = zh_site(site) / f"{doc}.html"
        assert page.exists(), f"{page} was not built"
        html = soup(page)
        assert html.html["lang"].startswith("zh"), (doc, html.html.get("lang"))
        main = html.select_one("main") or html
        text = main.get_text(" ")
        cjk = len(CJK.findall(text))
        assert cjk > 100, f"{doc}: only {cjk} Chinese characters on the Chinese page"


def test_the_theme_speaks_simplified_chinese_on_the_chinese_pages(site):
    from language_switch import SEARCH_TEXT, UI_WORDS

    for doc in toc_files():
        html = soup(zh_site(site) / f"{doc}.html")
        text = str(html)
        for old, new in UI_WORDS["zh"].items():
            assert old not in text and new in text, (doc, old)
        boxes = html.select("input[placeholder]")
        assert boxes, f"{doc}: no search box"
        for box in boxes:
            assert box["placeholder"] == SEARCH_TEXT["zh"], (doc, box["placeholder"])


def test_the_chinese_toc_is_the_english_toc_in_the_same_order(site):
    def nav(page: Path) -> list[str]:
        links = soup(page).select("nav.bd-docs-nav a.reference.internal")
        return [urlparse(a["href"]).path.removesuffix(".html") for a in links]

    english = nav(site / "book" / "index.html")
    chinese = nav(zh_site(site) / "book" / "index.html")
    assert len(english) >= len(toc_files()) - 1
    assert chinese == english
    captions = [
        c.get_text(strip=True)
        for c in soup(zh_site(site) / "book" / "index.html").select(
            "nav.bd-docs-nav p.caption"
        )
    ]
    assert captions == list(zh_edition.meta()["captions"].values())


def _switch(page: Path) -> Path:
    links = soup(page).select("a.language-switch")
    assert len(links) == 1, f"{page}: {len(links)} language switches"
    return (page.parent / links[0]["href"]).resolve()


def test_the_language_switch_goes_to_the_counterpart_and_back(site):
    for doc in toc_files():
        english = (site / f"{doc}.html").resolve()
        chinese = (zh_site(site) / f"{doc}.html").resolve()
        assert _switch(english) == chinese, doc
        assert _switch(chinese) == english, doc
        head = soup(chinese).select('link[rel="alternate"]')
        langs = {
            link["hreflang"]: (chinese.parent / link["href"]).resolve() for link in head
        }
        assert langs == {"en": english, "zh-CN": chinese}


def test_the_chinese_build_executed_nothing(site):
    """The Chinese pages' outputs are the English build's, from its cache."""
    log = (report_dir(site) / "build.log").read_text(encoding="utf-8")
    assert "Executing" not in log and "executing" not in log.lower().replace(
        "executing notebooks", ""
    ), log[-3000:]
    for doc in chapters():

        def outputs(page: Path) -> list[str]:
            return [o.get_text() for o in soup(page).select("div.cell_output")]

        english = outputs(site / f"{doc}.html")
        assert english and outputs(zh_site(site) / f"{doc}.html") == english, doc


def test_the_chinese_pages_show_the_chinese_diagrams(site):
    """Each diagram a page shows is, on the Chinese page, the SVG drawn with the
    Chinese labels (book/figures/zh/), and on the English page the English one."""
    figures = ROOT / "book" / "figures"
    shown = 0
    for doc in toc_files():
        for edition, folder in [(site, figures), (zh_site(site), figures / "zh")]:
            page = edition / f"{doc}.html"
            for img in soup(page).select("figure img[src$='.svg']"):
                svg = (page.parent / img["src"]).resolve()
                drawn = folder / svg.name
                assert drawn.exists(), f"{page}: {img['src']} is not a diagram"
                assert svg.read_bytes() == drawn.read_bytes(), f"{page}: {svg.name}"
                shown += 1
    assert shown == 2 * len(list(figures.glob("*.svg"))), shown


def test_the_chinese_font_covers_every_character_of_the_chinese_edition(site):
    from fontTools.ttLib import TTFont

    root = zh_site(site)
    text = "".join(p.read_text(encoding="utf-8") for p in root.rglob("*.html"))
    used = set(CJK.findall(text))
    assert len(used) > 1000
    font = root / "_static" / "cjk-subset.woff2"
    cmap = TTFont(font).getBestCmap()
    missing = sorted(c for c in used if ord(c) not in cmap)
    assert not missing, f"characters without a glyph in the Chinese font: {missing}"
    size = font.stat().st_size
    print(f"\nChinese edition font subset: {len(used)} characters, {size} bytes")
    (report_dir(site) / "font.json").write_text(
        json.dumps({"characters": len(used), "bytes": size}) + "\n"
    )
    english = site / "_static" / "cjk-subset.woff2"
    assert english.stat().st_size < size, "the English site got the big font"


def _search_index(site: Path) -> dict:
    text = (zh_site(site) / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1 : text.rindex(")")])


@pytest.mark.parametrize(
    ("word", "doc"),
    [("注意力", "book/addressing"), ("多头注意力", "book/multi-head-attention")],
)
def test_the_chinese_search_index_finds_chapters(site, word, doc):
    index = _search_index(site)
    docs = index["docnames"]
    found = set()
    for table in ("terms", "titleterms"):
        hits = index[table].get(word, [])
        found |= {docs[i] for i in ([hits] if isinstance(hits, int) else hits)}
    assert doc in found, f"{word}: {sorted(found)}"


@pytest.mark.parametrize("doc", chapters())
def test_chinese_exercise_sections_link_the_english_notebooks(site, doc):
    """The assignment notebooks stay English: the Chinese Exercise section says
    so, in Chinese, and offers the release notebook itself for download."""
    slug = doc.removeprefix("book/")
    release = zh_edition.ROOT / "exercises" / slug / f"{slug}.ipynb"
    if not release.exists():
        pytest.skip(f"{slug} has no assignment")
    page = zh_site(site) / f"{doc}.html"
    html = soup(page)
    links = [
        a["href"]
        for a in html.select("a.reference.download")
        if a["href"].endswith(f"/{slug}.ipynb")
    ]
    assert links, f"{doc}: no download of the assignment notebook"
    notebook = (page.parent / urlparse(links[0]).path).resolve()
    assert notebook.read_bytes() == release.read_bytes()
    text = html.get_text(" ")
    assert "作业笔记本用英文写成" in text and "下载作业（英文笔记本）" in text
    # the section's prose is Chinese (book/zh/_assignments.md)
    section = html.select_one("div.assignment")
    assert section is not None, f"{doc}: no Exercise section"
    assert "第 1 部分" in section.get_text(" ")
    for word in ("How this notebook is graded", "Write your code where", "Chapter:"):
        assert word not in section.get_text(" "), (doc, word)


def test_chinese_glossary_links_land_on_chinese_glossary_entries(site):
    glossary = zh_site(site) / "book" / "glossary.html"
    html = soup(glossary)
    ids = {node["id"] for node in html.select("dl.glossary dt[id]")}
    terms = zh_edition.termbase()
    shown = {
        dt.get_text(strip=True).rstrip("¶#") for dt in html.select("dl.glossary dt")
    }
    assert set(terms.values()) <= shown, set(terms.values()) - shown
    linked = 0
    for doc in toc_files():
        page = zh_site(site) / f"{doc}.html"
        for a in soup(page).select("a.reference.internal"):
            url = urlparse(a["href"])
            if not url.path.endswith("glossary.html") or not url.fragment.startswith(
                "term-"
            ):
                continue
            linked += 1
            assert (page.parent / url.path).resolve() == glossary.resolve(), a["href"]
            assert url.fragment in ids, (doc, a["href"])
            assert CJK.search(a.get_text()), (doc, a.get_text())
    assert linked >= 40


def test_the_coverage_report_says_every_page_is_translated(site):
    rows = json.loads((report_dir(site) / "coverage.json").read_text())
    # every page, then the Exercise sections' prose (book/zh/_assignments.md)
    assert [r["page"] for r in rows] == [
        *zh_edition.page_names(),
        zh_edition.ASSIGNMENTS_NAME,
    ]
    assert all(r["coverage"] == 1 and r["units"] > 0 for r in rows), rows
    table = (report_dir(site) / "coverage.md").read_text()
    assert "| **all** |" in table and "(100.0%)" in table
    seconds = float((report_dir(site) / "build-seconds.txt").read_text())
    assert seconds > 0


def test_chinese_emphasis_is_upright_on_the_chinese_pages(site):
    """No italic Chinese: every <em> with Chinese text has the class whose CSS
    sets it upright with emphasis dots (book/_ext/cjk_webfont.py)."""
    from cjk_webfont import EMPHASIS_CLASS, EMPHASIS_CSS, HAN

    marked, slanted = 0, []
    for doc in toc_files():
        for em in soup(zh_site(site) / f"{doc}.html").select("main em"):
            if HAN.search(em.get_text()):
                if EMPHASIS_CLASS in em.get("class", []):
                    marked += 1
                else:
                    slanted.append(f"{doc}: {em.get_text()}")
    assert not slanted, slanted[:10]
    assert marked > 50
    css = (zh_site(site) / "_static" / "cjk-webfont.css").read_text(encoding="utf-8")
    assert EMPHASIS_CSS in css


def _prose(text: str) -> str:
    """A Chinese page's source without its code cells."""
    return "\n".join(i.text for i in zh_edition.split(text) if i.kind != "code")


def _searched_terms() -> list[str]:
    """The terms readers searched for and the glossary's Chinese terms (those
    the index can hold: two characters or more, no space)."""
    terms = {t for t in zh_edition.termbase().values() if " " not in t}
    terms |= {"教师强制", "贪心解码", "束搜索", "曝光偏差", "残差流", "多查询注意力"}
    return sorted(t for t in terms if len(t) > 1)


@pytest.mark.parametrize("term", _searched_terms())
def test_the_built_search_index_finds_each_term_where_it_is_used(site, term):
    """Each term is one word of the built index, pointing at the pages whose
    text has it (the glossary at least, for a glossary term)."""
    index = _search_index(site)
    docs = index["docnames"]
    found = set()
    for table in ("terms", "titleterms"):
        hits = index[table].get(term, [])
        found |= {docs[i] for i in ([hits] if isinstance(hits, int) else hits)}
    using = {
        f"book/{n}"
        for n in zh_edition.page_names()
        if term in _prose(zh_edition.assemble(n)[0])
    }
    assert using, f"{term} is on no page"
    assert using <= found, f"{term}: not found on {sorted(using - found)}"
