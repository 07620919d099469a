"""Checks on the book's sources that need no build."""

import ast
import json
import re
import subprocess

import pytest
from support.book import (
    FRAMEWORK_TAGS,
    ROOT,
    chapters,
    code_cells,
    is_notebook,
    source_path,
    toc_files,
)

import attncourse.numpy as anp


def test_toc_names_existing_files():
    for doc in toc_files():
        assert source_path(doc).exists()


def test_every_book_page_is_in_the_toc():
    listed = {str(source_path(doc).relative_to(ROOT)) for doc in toc_files()}
    pages = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "book").rglob("*.md")
        # book/zh holds the Chinese edition's translations (zh_edition.py), no pages
        if "_ext" not in p.parts and "zh" not in p.parts
    }
    assert pages <= listed, f"pages missing from _toc.yml: {sorted(pages - listed)}"


@pytest.mark.parametrize("doc", chapters())
def test_chapter_is_a_myst_notebook_with_both_frameworks(doc):
    path = source_path(doc)
    assert is_notebook(path)
    tags = {t for t_list, _ in code_cells(path) for t in t_list}
    if doc != "book/index":
        assert set(FRAMEWORK_TAGS) <= tags, f"{doc} lacks a TensorFlow or PyTorch cell"


def parse_cell(code: str) -> ast.Module:
    """A code cell's Python, without IPython magics and shell lines."""
    lines = code.splitlines()
    return ast.parse("\n".join(ln for ln in lines if not ln.startswith(("%", "!"))))


def _body(node) -> str:
    """A function's or class's body as an AST dump, its docstring left out."""
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    ):
        body = body[1:]
    return "\n".join(ast.dump(stmt) for stmt in body)


def _library_definitions() -> tuple[set, dict]:
    """(names a chapter must not reuse, body dump -> where the library has it).

    The names: the NumPy reference's public API and the chapter helpers of
    attncourse.notebook and attncourse.plotting (max_diff, tilt_key_labels...).
    The bodies: every function and class of the package, private ones too, so
    a copy under another name is found as well."""
    names = set(anp.__all__)
    bodies = {}
    for path in sorted((ROOT / "attncourse").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                helper = path.stem in ("notebook", "plotting") and node in tree.body
                if helper and not node.name.startswith("_"):
                    names.add(node.name)
                if len(node.body) > 1 or not isinstance(node.body[0], ast.Pass):
                    where = f"{path.relative_to(ROOT)}:{node.name}"
                    bodies.setdefault(_body(node), where)
    return names, bodies


LIBRARY_NAMES, LIBRARY_BODIES = _library_definitions()


def _chapter_definitions(code: str):
    tree = parse_cell(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            yield node


def _checks_against_library(tags: list[str], code: str, name: str) -> bool:
    """True if the cell asserts something and reads both the chapter's ``name``
    and the library's attribute of that name (``atf.SelfAttention`` ...)."""
    tree = parse_cell(code)
    nodes = list(ast.walk(tree))
    return (
        any(isinstance(n, ast.Assert) for n in nodes)
        and any(isinstance(n, ast.Name) and n.id == name for n in nodes)
        and any(isinstance(n, ast.Attribute) and n.attr == name for n in nodes)
    )


def copies_of_library_code(cells: list[tuple[list[str], str]]) -> list[str]:
    """Why each class or function the cells define is a copy of library code.

    A definition may not copy the body of a library function (under any
    name). It may reuse a library *name* only as a step-by-step teaching cell
    that the page checks against the library: a cell of the same framework
    tab (or an untagged one), at or after the definition, that asserts and
    reads both the chapter's name and the library's (``CustomAttention`` and
    ``atf.CustomAttention``). Such a cell shows the reader the library *is*
    what they watched being built; it is not a second copy."""
    problems = []
    for index, (tags, code) in enumerate(cells):
        framework = set(tags) & set(FRAMEWORK_TAGS)
        for node in _chapter_definitions(code):
            copied = LIBRARY_BODIES.get(_body(node))
            if copied is not None and len(node.body) >= 2:
                problems.append(
                    f"defines {node.name} with the body of {copied}; import it "
                    f"(or show it with show_source()) instead"
                )
            if node.name in LIBRARY_NAMES and not any(
                _checks_against_library(later_tags, later_code, node.name)
                for later_tags, later_code in cells[index:]
                if not (set(later_tags) & set(FRAMEWORK_TAGS)) - framework
            ):
                problems.append(
                    f"defines {node.name}, which the attncourse package already "
                    f"has; show it with show_source(), or assert on the page "
                    f"that it equals the library's {node.name}"
                )
    return problems


@pytest.mark.parametrize("doc", chapters())
def test_chapter_does_not_redefine_library_code(doc):
    """One source of truth: chapters show library code, they do not copy it --
    neither under the library's name nor under another one. A teaching cell
    that rebuilds a library layer and is checked against it is allowed."""
    problems = copies_of_library_code(code_cells(source_path(doc)))
    assert not problems, f"{doc}: " + "; ".join(problems)


def test_a_teaching_cell_must_be_checked_against_the_library():
    layer = "class CustomAttention:\n    def call(self, x):\n        return x @ x\n"
    unchecked = [(["tensorflow"], layer)]
    assert copies_of_library_code(unchecked)
    checked = "mine, lib = CustomAttention(), atf.CustomAttention()\n"
    checked += "assert max_diff(mine(x), lib(x)) < 1e-6\n"
    assert not copies_of_library_code([*unchecked, (["tensorflow"], checked)])
    # a check without an assert, or in the other framework's tab, is no check
    no_assert = checked.replace("assert ", "print")
    assert copies_of_library_code([*unchecked, (["tensorflow"], no_assert)])
    assert copies_of_library_code([*unchecked, (["pytorch"], checked)])
    # a check must come at or after the definition
    assert copies_of_library_code([(["tensorflow"], checked), *unchecked])


def test_the_copy_check_sees_a_renamed_copy():
    source = ROOT / "attncourse" / "notebook.py"
    tree = ast.parse(source.read_text())
    max_diff = next(n for n in tree.body if getattr(n, "name", "") == "max_diff")
    renamed = ast.unparse(max_diff).replace("def max_diff", "def biggest_gap", 1)
    node = next(_chapter_definitions(renamed))
    assert LIBRARY_BODIES.get(_body(node)) == "attncourse/notebook.py:max_diff"
    assert "max_diff" in LIBRARY_NAMES and "tilt_key_labels" in LIBRARY_NAMES


SHOWN = re.compile(r"show_source\(\s*([\w.]+)")


@pytest.mark.parametrize("doc", chapters())
def test_shown_code_is_public(doc):
    """The book shows the library's public functions, never a private helper
    (a named step the reader should see gets a public name)."""
    for _, code in code_cells(source_path(doc)):
        for target in SHOWN.findall(code):
            private = [part for part in target.split(".") if part.startswith("_")]
            assert not private, f"{doc} shows the private {target}"


def test_no_committed_notebook_has_outputs():
    listed = subprocess.run(
        ["git", "ls-files", "*.ipynb"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in listed:
        nb = json.loads((ROOT / name).read_text())
        for cell in nb.get("cells", []):
            assert not cell.get("outputs"), f"{name} has committed outputs"
            assert cell.get("execution_count") is None, f"{name} has execution counts"


# A learner reads on a laptop: a chapter is one idea, and its code fits the
# page column (the theme's content column holds ~80 monospace characters at
# 1280 px; the browser test checks the built pages do not scroll sideways).
MAX_CHAPTER_LINES = 650
MAX_CODE_WIDTH = 79
FIRST_PARTS = (
    "Foundations",
    "Attention layers",
    "The Transformer",
    "Efficient attention",
)


def lessons() -> list[str]:
    """The chapters of the course's first parts (not the index or reference)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [
        chapter["file"]
        for part in toc["parts"]
        if part["caption"] in FIRST_PARTS
        for chapter in part["chapters"]
    ]


def test_the_first_parts_are_the_lessons():
    assert len(lessons()) >= 9 and set(lessons()) <= set(chapters())


@pytest.mark.parametrize("doc", chapters())
def test_chapter_is_one_sitting_long(doc):
    lines = source_path(doc).read_text().count("\n")
    assert lines <= MAX_CHAPTER_LINES, (
        f"{doc} has {lines} source lines (at most {MAX_CHAPTER_LINES}): split it, "
        f"link instead of repeating, or cut"
    )


@pytest.mark.parametrize("doc", chapters())
def test_code_fits_the_column(doc):
    wide = [
        line
        for _, code in code_cells(source_path(doc))
        for line in code.splitlines()
        if len(line) > MAX_CODE_WIDTH
    ]
    assert not wide, (
        f"{doc}: {len(wide)} code line(s) wider than {MAX_CODE_WIDTH} characters "
        f"scroll sideways on a laptop, e.g. {wide[0]!r}"
    )


FIGURE = re.compile(r"^```\{figure\}\s+(\S+\.svg)\s*$", re.M)


@pytest.mark.parametrize("doc", lessons())
def test_lesson_has_a_diagram(doc):
    path = source_path(doc)
    figures = FIGURE.findall(path.read_text())
    assert figures, f"{doc} has no diagram (```{{figure}} figures/<name>.svg)"
    for name in figures:
        assert (path.parent / name).is_file(), f"{doc}: {name} does not exist"


OPTIONAL = re.compile(r"^(#+) .*\(optional\)\s*$", re.M)


@pytest.mark.parametrize("doc", chapters())
def test_optional_sections_say_so_first(doc):
    """A section marked optional opens with the admonition a skimming reader sees."""
    text = source_path(doc).read_text()
    for match in OPTIONAL.finditer(text):
        opening = text[match.end() :].lstrip("\n")
        assert opening.startswith(":::{admonition} Optional"), (
            f"{doc}: {match.group(0).strip()!r} must open with the "
            f"':::{{admonition}} Optional' box"
        )


def names_in(code: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads) -- imports, defs, targets, loads."""
    tree = parse_cell(code)
    binds, reads = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            binds.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            binds.update((a.asname or a.name).split(".")[0] for a in node.names)
    return binds, reads


@pytest.mark.parametrize("doc", chapters())
def test_shared_cells_read_no_single_framework(doc):
    """A cell outside the tabs reads NumPy, names both tabs define, or both
    frameworks' results side by side -- never one framework's variables, so a
    learner who runs only the TensorFlow (or only the PyTorch) cells can run it."""
    origin: dict[str, str] = {}  # name -> the framework tag that bound it last
    for number, (tags, code) in enumerate(code_cells(source_path(doc)), 1):
        framework = next((t for t in tags if t in FRAMEWORK_TAGS), None)
        binds, reads = names_in(code)
        if framework is None:
            read = {origin[n] for n in reads - binds if n in origin}
            only = read & set(FRAMEWORK_TAGS)
            assert len(only) != 1, (
                f"{doc}, code cell {number} (untagged) reads "
                f"{sorted(n for n in reads - binds if origin.get(n) in only)}, "
                f"bound only in {only.pop()} cells"
            )
            origin.update(dict.fromkeys(binds, "shared"))
        else:
            for name in binds:
                before = origin.get(name)
                origin[name] = framework if before in (None, "shared") else before
                if before not in (None, "shared", framework):
                    origin[name] = "both"
