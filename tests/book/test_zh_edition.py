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
    for path in ("_toc.yml", "_config.yml", "book/zh", "book/figures"):
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
def test_chinese_exercise_sections_say_the_notebooks_are_english(slug):
    import assignment_section as sect

    chinese = sect.render(slug, ROOT, language="zh")
    assert "作业笔记本用英文写成" in chinese and "英文笔记本" in chinese
    assert f"</exercises/{slug}/{slug}.ipynb>" in chinese
    assert "| 部分 | 你要实现的 | 可见测试 | 隐藏测试 | 分值 |" in chinese
    # the notebook's own words (its title, intro, interface) are the English ones
    a = sect.read_assignment(ROOT / "solutions" / slug / f"{slug}.ipynb", slug)
    assert a.title in chinese
    for part in a.parts:
        assert f"{part.title} — {part.points} 分" in chinese
        assert all(f"`{n}`" in chinese for n in part.names)


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
