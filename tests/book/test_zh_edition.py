"""The Chinese edition's sources (book/_ext/zh_edition.py, book/zh/): no build.

Every English page has a complete, current translation; drift (an edited, new or
removed English unit) is named; glossary links use the termbase's Chinese; the
code of a Chinese page is the English code byte for byte.
"""

import re
import shutil

import pytest
import yaml
import zh_edition  # book/_ext is on sys.path (support.book)
from support.book import ROOT, code_cells, toc_files

PAGES = zh_edition.page_names()


def test_every_toc_page_has_a_translation_file():
    assert [d.removeprefix("book/") for d in toc_files()] == PAGES
    missing = [n for n in PAGES if not zh_edition.translation_path(n).exists()]
    assert not missing, f"pages without book/zh/<name>.md: {missing}"


@pytest.mark.parametrize("name", PAGES)
def test_the_translation_is_complete_and_current(name):
    _, report = zh_edition.assemble(name)
    assert report.units > 0
    assert not report.problems, "\n".join(report.problems)
    assert report.translated == report.units


@pytest.mark.parametrize("name", PAGES)
def test_split_keeps_every_byte_and_the_code_is_the_english_code(name, tmp_path):
    english = zh_edition.english_path(name).read_text(encoding="utf-8")
    items = zh_edition.split(english)
    assert "\n".join(i.text for i in items) == english
    chinese, _ = zh_edition.assemble(name)
    english_cells = code_cells(zh_edition.english_path(name))
    zh_file = tmp_path / f"{name}.md"
    zh_file.write_text(chinese, encoding="utf-8")
    assert code_cells(zh_file) == english_cells
    verbatim = [i.text for i in items if i.kind != "unit"]
    for piece in verbatim:
        assert piece in chinese


@pytest.mark.parametrize("name", PAGES)
def test_chinese_pages_link_glossary_terms_with_the_termbase_chinese(name):
    """Each {term} of the English page is linked on the Chinese page, shown with
    the glossary's own Chinese term (the termbase)."""
    english = zh_edition.english_path(name).read_text(encoding="utf-8")
    chinese, _ = zh_edition.assemble(name)
    targets = sorted(t.lower() for _, t in zh_edition.term_roles(english))
    roles = zh_edition.term_roles(chinese)
    assert sorted(t.lower() for _, t in roles) == targets
    terms = zh_edition.termbase()
    wrong = [(s, t) for s, t in roles if terms[t.lower()] not in s]
    assert not wrong, f"{{term}} shown without the termbase's Chinese: {wrong}"


def test_the_termbase_is_the_glossary():
    terms = zh_edition.termbase()
    glossary = zh_edition.english_path("glossary").read_text(encoding="utf-8")
    entries = re.findall(r"^([a-zA-Z][^\n]*)\n  ([^\n]+)", glossary, re.M)
    assert len(terms) >= 40
    for head, definition in entries:
        assert terms[head.strip().lower()] in definition
    # one Chinese term per entry: the Chinese glossary's terms are unique
    chinese = {}
    for head, zh in terms.items():
        chinese.setdefault(zh, set()).add(head)
    assert all(len(v) == 1 or len({terms[h] for h in v}) == 1 for v in chinese.values())


def test_the_chinese_glossary_names_each_chinese_then_english_term():
    chinese, _ = zh_edition.assemble("glossary")
    terms = zh_edition.termbase()
    block = chinese.split("```{glossary}", 1)[1].split("\n```", 1)[0]
    heads = [line for line in block.split("\n") if line and not line.startswith(" ")]
    english = set(terms)
    assert english <= {h.lower() for h in heads}
    for zh in set(terms.values()):
        assert zh in heads, f"the Chinese glossary has no entry {zh!r}"


def test_term_problems_name_a_wrong_or_lost_term():
    ok = "在{term}`自注意力 <self-attention>`中"
    assert zh_edition.term_problems("In {term}`self-attention`", ok) == []
    wrong = zh_edition.term_problems(
        "In {term}`self-attention`", "{term}`注意力 <self-attention>`"
    )
    assert "自注意力" in wrong[0]
    lost = zh_edition.term_problems("In {term}`self-attention`", "在自注意力中")
    assert "differ from the English" in lost[0]
    unknown = zh_edition.term_problems("{term}`nope`", "{term}`不 <nope>`")
    assert any("not in the glossary" in p for p in unknown)


@pytest.mark.parametrize(
    ("english", "chinese", "problem"),
    [
        ("Scores $QK^\\top$ here.", "分数 $KQ^\\top$。", "math not in the English"),
        ("Call `mha(x)`.", "调用 `mha(y)`。", "code not in the English"),
        ("See {ref}`chapter-a`.", "见{ref}`第一章 <chapter-b>`。", "link target"),
        (
            "```{figure} a.svg\n:name: fig-a\nCaption.\n```",
            "```{figure} b.svg\n:name: fig-a\n图。\n```",
            "must open with",
        ),
        (
            "```{figure} a.svg\n:name: fig-a\nCaption.\n```",
            "```{figure} a.svg\n:name: fig-b\n图。\n```",
            "option not in the English",
        ),
    ],
)
def test_span_problems_catch_changed_math_code_targets_and_options(
    english, chinese, problem
):
    assert any(problem in p for p in zh_edition.span_problems(english, chinese))


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A copy of the sources that zh_edition.py reads, to edit the English."""
    for path in ("_toc.yml", "_config.yml", "book/zh", "book/figures", "solutions"):
        src, dst = ROOT / path, tmp_path / path
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    for name in PAGES:
        shutil.copy(ROOT / "book" / f"{name}.md", tmp_path / "book" / f"{name}.md")
    monkeypatch.setattr(zh_edition, "ROOT", tmp_path)
    monkeypatch.setattr(zh_edition, "ZH", tmp_path / "book" / "zh")
    monkeypatch.setattr(zh_edition, "META", tmp_path / "book" / "zh" / "_meta.yml")
    zh_edition.termbase.cache_clear()
    yield tmp_path
    zh_edition.termbase.cache_clear()


def _first_paragraph(name: str) -> zh_edition.Item:
    items = zh_edition.split(zh_edition.english_path(name).read_text(encoding="utf-8"))
    return next(i for i in items if i.kind == "unit" and not i.text.startswith("#"))


def test_an_edited_english_paragraph_fails_status_and_build_naming_it(sandbox, capsys):
    name = "self-attention"
    unit = _first_paragraph(name)
    page = sandbox / "book" / f"{name}.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace(unit.text, unit.text + " Edited."),
        encoding="utf-8",
    )
    _, report = zh_edition.assemble(name)
    assert (
        len(report.missing) == 1 and f"book/{name}.md:{unit.line}" in report.missing[0]
    )
    assert len(report.stale) == 1 and unit.hash in report.stale[0]
    assert zh_edition.main(["status", name]) == 1
    assert zh_edition.main(["build", "--path-output", str(sandbox / "out")]) == 1
    err = capsys.readouterr().err
    assert f"book/{name}.md:{unit.line}" in err and unit.hash in err
    # sync writes the English as a placeholder (still failing) and keeps the old
    # translation, marked stale, for the translator to reuse
    zh_edition.sync(name)
    text = zh_edition.translation_path(name).read_text(encoding="utf-8")
    assert f"<!-- en {unit.hash} | STALE" in text
    assert unit.text + " Edited." in text
    _, report = zh_edition.assemble(name)
    assert report.untranslated and report.stale and not report.missing


def test_a_new_english_page_without_translations_fails(sandbox):
    name = "addressing"
    zh_edition.translation_path(name).unlink()
    _, report = zh_edition.assemble(name)
    assert report.translated == 0 and len(report.missing) == report.units


def test_a_removed_english_paragraph_leaves_a_stale_translation(sandbox):
    name = "positions"
    unit = _first_paragraph(name)
    page = sandbox / "book" / f"{name}.md"
    page.write_text(page.read_text(encoding="utf-8").replace(unit.text, ""), "utf-8")
    _, report = zh_edition.assemble(name)
    assert [s for s in report.stale if unit.hash in s] and not report.missing


def test_the_chinese_book_config_and_toc(tmp_path):
    out = tmp_path
    config = zh_edition.zh_config(out)
    sphinx = config["sphinx"]["config"]
    assert sphinx["language"] == "zh_CN" and sphinx["html_search_language"] == "zh"
    assert sphinx["language_switch_edition"] == "zh"
    assert sphinx["assignment_language"] == "zh"
    assert config["execute"]["cache"] == str(out / "_build" / ".jupyter_cache")
    assert sphinx["html_search_options"]["dict"].startswith("/")
    assert "zh_search" in config["sphinx"]["local_extensions"]  # query splitter
    english = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chinese = zh_edition.zh_toc()
    names = [c["file"] for p in chinese["parts"] for c in p["chapters"]]
    assert names == [c["file"] for p in english["parts"] for c in p["chapters"]]
    captions = [p["caption"] for p in chinese["parts"]]
    assert all(zh_edition.CJK.search(c) or c == "Transformer" for c in captions)


def test_the_search_dictionary_keeps_glossary_terms_whole():
    words = [line.split()[0] for line in zh_edition.search_dictionary().splitlines()]
    assert {"注意力", "多头注意力", "自注意力", "缩放点积注意力"} <= set(words)
    assert all(" " not in w for w in words)


def _assignment_slugs() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "exercises").glob("*/*.ipynb"))


@pytest.mark.parametrize("slug", _assignment_slugs())
def test_chinese_exercise_sections_are_chinese(slug):
    """The notebooks stay English; the Chinese Exercise section says so, and its
    prose (title, intro, part titles, test lines) is Chinese: every prose unit
    the notebook supplies is replaced by its translation. The code it shows
    (the def/class lines, their docstrings) is the notebook's."""
    import assignment_section as sect

    chinese = sect.render(slug, ROOT, language="zh")
    assert "作业笔记本用英文写成" in chinese and "英文笔记本" in chinese
    assert f"</exercises/{slug}/{slug}.ipynb>" in chinese
    assert "| 部分 | 你要实现的 | 可见测试 | 隐藏测试 | 分值 |" in chinese
    a = sect.read_assignment(ROOT / "solutions" / slug / f"{slug}.ipynb", slug)
    prose = re.sub(r"^(`{3,})python\n.*?^\1$", "", chinese, flags=re.S | re.M)
    for unit in zh_edition.assignment_units(a):
        assert unit not in prose, f"still English: {unit[:60]!r}"
    assert f"```{{rubric}} {a.title}" not in chinese
    for i, part in enumerate(a.parts, 1):
        label = part.title.split("·", 1)[1].strip()
        assert f"第 {i} 部分 · {label} — {part.points} 分" in chinese
        assert all(f"`{n}`" in chinese for n in part.names)
        assert all(stub in chinese for stub in part.stubs)
    tests = [line for line in chinese.splitlines() if line.startswith("- 隐藏测试")]
    assert tests and all(zh_edition.CJK.search(t.split("：", 1)[1]) for t in tests)
    assert "<!--" not in chinese


def test_the_exercise_translations_are_complete_and_current():
    report = zh_edition.assignments_report()
    assert report.units > 100
    assert not report.problems, "\n".join(report.problems)
    assert report.translated == report.units


def _edit_notebook_intro(root, slug: str, old: str, new: str) -> None:
    import json

    path = root / "solutions" / slug / f"{slug}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "intro":
            text = "".join(cell["source"])
            assert old in text
            cell["source"] = text.replace(old, new)
    path.write_text(json.dumps(nb), encoding="utf-8")


def test_an_edited_notebook_intro_fails_status_naming_it(sandbox, capsys):
    """Drift of the Exercise sections is an error, as for a page: the edited
    unit is missing, its old translation stale; sync writes the placeholder."""
    _edit_notebook_intro(sandbox, "addressing", "the more its value counts", "the more")
    assert zh_edition.main(["status", "_assignments"]) == 1
    out = capsys.readouterr().out
    assert "solutions/addressing/addressing.ipynb: no translation of" in out
    assert "translates English that is no longer there" in out
    zh_edition.main(["sync", "_assignments"])
    capsys.readouterr()
    assert zh_edition.main(["status", "_assignments"]) == 1
    out = capsys.readouterr().out
    assert "is still English" in out and "no longer there" in out


def test_an_unknown_assignment_language_is_refused():
    import assignment_section as sect

    slug = _assignment_slugs()[0]
    with pytest.raises(sect.AssignmentError, match="assignment_language"):
        sect.render(slug, ROOT, language="fr")


def test_chinese_emphasis_is_marked_upright_and_latin_emphasis_is_not():
    """Chinese has no italics: emphasis with Chinese text gets the ``cjk`` class,
    which the CSS shows upright with emphasis dots (book/_ext/cjk_webfont.py)."""
    from cjk_webfont import EMPHASIS_CLASS, EMPHASIS_CSS, CJKEmphasis
    from docutils import nodes
    from docutils.utils import new_document

    document = new_document("<test>")
    chinese, latin, mixed = (
        nodes.emphasis(text=t) for t in ("软", "not", "expected loss 期望损失")
    )
    document += nodes.paragraph("", "", chinese, latin, mixed)
    CJKEmphasis(document).apply()
    assert [EMPHASIS_CLASS in e["classes"] for e in (chinese, latin, mixed)] == [
        True,
        False,
        True,
    ]
    rule = EMPHASIS_CSS.split("}")[0]
    assert rule.startswith(f"em.{EMPHASIS_CLASS} {{")
    assert "font-style: normal" in rule and "text-emphasis: filled dot" in rule


def test_the_chinese_pages_emphasize_chinese_text():
    """There is Chinese emphasis for the rule to mark (it is not dead code)."""
    starred = re.compile(r"(?<![*\\])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\*)")
    found = 0
    for name in PAGES:
        text, _ = zh_edition.assemble(name)
        for match in starred.finditer(re.sub(r"\$[^$]*\$|`[^`]*`", "", text)):
            found += bool(zh_edition.CJK.search(match[1]))
    assert found > 50


# terms a reader searched for and did not find (the search splitter cut them)
SEARCHED = ["教师强制", "贪心解码", "束搜索", "曝光偏差", "残差流", "多查询注意力"]


def _glossary_terms() -> list[str]:
    """The glossary's Chinese terms and aliases that jieba can keep whole (Chinese
    characters only: it cuts at spaces and punctuation)."""
    terms = set(zh_edition.termbase().values())
    terms |= {a for aliases in zh_edition.ALIASES.values() for a in aliases}
    return sorted(t for t in terms if re.fullmatch(r"[\u4e00-\u9fff]+", t))


@pytest.fixture(scope="module")
def search_dictionary(tmp_path_factory):
    path = tmp_path_factory.mktemp("search") / zh_edition.SEARCH_DICT
    path.write_text(zh_edition.search_dictionary(), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("term", SEARCHED + _glossary_terms())
def test_the_search_index_keeps_each_term_whole_where_it_is_used(
    term, search_dictionary
):
    """Sphinx's Chinese search cuts the text with jieba and the user dictionary
    (zh_edition.search_dictionary); a term cut into pieces is a term nobody
    finds. Every page using the term gets it as one word of the index."""
    from zh_search import index_words

    if len(term) < 2:
        pytest.skip(f"{term}: Sphinx indexes no one-character word")
    pages = [n for n in PAGES if term in zh_edition.assemble(n)[0]]
    assert pages, f"{term} is on no page"
    for name in pages:
        text = zh_edition.assemble(name)[0]
        assert term in index_words(text, search_dictionary), name


def _split_query(query: str, terms: list[str]) -> list[str]:
    """The Chinese edition's query splitter (zh_search.JS_SPLITTER), run by node
    on an index that has ``terms``."""
    import json
    import subprocess

    from zh_search import JS_SPLITTER

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the query splitter")
    index = {"terms": dict.fromkeys(terms, 0), "titleterms": {}}
    script = (
        f"const Search = {{_index: {json.dumps(index)}}};\n{JS_SPLITTER}\n"
        f"console.log(JSON.stringify(splitQuery({json.dumps(query)})));"
    )
    out = subprocess.run(
        [node, "-e", script], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def test_the_query_splitter_cuts_a_chinese_query_into_index_words():
    terms = ["教师", "强制", "教师强制", "注意力", "多头注意力", "函数", "softmax"]
    assert _split_query("教师强制", terms) == ["教师强制"]
    assert _split_query("多头注意力", terms) == ["多头注意力"]
    # not a word of the index: the longest index words, left to right
    assert _split_query("多头注意力函数", terms) == ["多头注意力", "函数"]
    assert _split_query("教师强制 softmax函数", terms) == [
        "教师强制",
        "softmax",
        "函数",
    ]
    # a lone character the index lacks is dropped (it would match no page)
    assert _split_query("键的强制", terms) == ["强制"]
    # nothing known: the query as the default splitter gives it
    assert _split_query("完全陌生", terms) == ["完全陌生"]


def test_a_sphinx_build_with_the_chinese_search_finds_the_terms(
    tmp_path, search_dictionary
):
    """A small Sphinx project with the Chinese edition's search settings
    (zh_edition.zh_config): the built index has each searched term as a word,
    and the query splitter keeps it whole."""
    import json

    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    text = (
        "训练采用教师强制，测试时用贪心解码或束搜索，两者的不一致称为曝光偏差。"
        "每一层都往残差流上加东西；多查询注意力让所有查询头共用一组键/值头。"
        "缩放点积注意力与层归一化。"
    )
    (src / "index.rst").write_text(f"术语\n====\n\n{text}\n", encoding="utf-8")
    (src / "conf.py").write_text(
        "extensions = ['zh_search']\n"
        "language = 'zh_CN'\nhtml_search_language = 'zh'\n"
        f"html_search_options = {{'dict': {search_dictionary!r}}}\n",
        encoding="utf-8",
    )
    out = tmp_path / "html"
    app = Sphinx(src, src, out, tmp_path / "doctrees", "html", status=None)
    app.build()
    raw = (out / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(raw[raw.index("(") + 1 : raw.rindex(")")])
    for term in [*SEARCHED, "点积注意力", "层归一化"]:
        assert term in index["terms"], term
        assert _split_query(term, list(index["terms"])) == [term]
    # the browser gets the query splitter
    language_data = out / "_static" / "language_data.js"
    assert "Script=Han" in language_data.read_text(encoding="utf-8")


def test_the_chinese_index_names_the_three_source_notes():
    """Chapters cite the notes as 笔记 000, 001 and 004; the index says which
    note each number is."""
    cited = set()
    for name in PAGES:
        cited |= set(re.findall(r"笔记 (\d{3})", zh_edition.assemble(name)[0]))
    index, _ = zh_edition.assemble("index")
    for number in sorted(cited):
        entry = re.search(rf"^- \*\*笔记 {number}\*\*，(.+)$", index, re.M)
        assert entry, f"the index does not name 笔记 {number}"
        assert "《" in entry[1] or "笔记" in entry[1]
    assert cited == {"000", "001", "004"}


def test_variant_problems_name_a_variant_outside_quotes_math_and_code():
    problems = zh_edition.variant_problems("固定大小的记忆；每个 kv 头重复；右下对齐。")
    assert problems == [
        "uses '记忆': the edition's term is '存储器'",
        "uses 'kv 头': the edition's term is '键/值头'",
        "uses '右下对齐': the edition's term is '右下角对齐'",
    ]
    # a note quoted word for word, an alias named, code and math are not prose
    quoted = "笔记写道：“硬性注意力需要通过强化学习来训练”。`kv 头` 与 $\\text{记忆}$"
    assert zh_edition.variant_problems(quoted) == []
    assert zh_edition.variant_problems("长短期记忆网络与得分函数估计量") == []


def test_the_variant_table_points_at_terms_the_edition_uses():
    """Each preferred term is used and is no variant itself; each alias the
    glossary names is a variant or a term of another textbook, never the
    edition's own term."""
    text = "\n".join(zh_edition.assemble(n)[0] for n in PAGES)
    for pattern, term in zh_edition.VARIANTS:
        assert term in text, term
        assert not re.search(pattern, term), (pattern, term)
    terms = set(zh_edition.termbase().values())
    assert set(zh_edition.ALIASES) <= terms
    for term, aliases in zh_edition.ALIASES.items():
        assert not set(aliases) & terms, term


def test_a_variant_or_a_missing_alias_fails_status(sandbox, capsys):
    """Status reports a non-preferred variant as a problem, and a glossary entry
    that drops the alias readers of d2l-zh know."""
    page = zh_edition.translation_path("sparse-linear-attention")
    page.write_text(
        page.read_text(encoding="utf-8").replace("固定大小的存储器", "固定大小的记忆"),
        encoding="utf-8",
    )
    glossary = zh_edition.translation_path("glossary")
    glossary.write_text(
        glossary.read_text(encoding="utf-8").replace("“层规范化”", "层规范化"),
        encoding="utf-8",
    )
    assert zh_edition.main(["status", "sparse-linear-attention", "glossary"]) == 1
    out = capsys.readouterr().out
    assert "uses '记忆': the edition's term is '存储器'" in out
    assert "must name the alias “层规范化”" in out
