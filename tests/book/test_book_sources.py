"""Checks on the book's sources that need no build."""

import ast
import json
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
        if "_ext" not in p.parts
    }
    assert pages <= listed, f"pages missing from _toc.yml: {sorted(pages - listed)}"


@pytest.mark.parametrize("doc", chapters())
def test_chapter_is_a_myst_notebook_with_both_frameworks(doc):
    path = source_path(doc)
    assert is_notebook(path)
    tags = {t for t_list, _ in code_cells(path) for t in t_list}
    if doc != "book/index":
        assert set(FRAMEWORK_TAGS) <= tags, f"{doc} lacks a TensorFlow or PyTorch cell"


@pytest.mark.parametrize("doc", chapters())
def test_chapter_does_not_redefine_library_code(doc):
    """One source of truth: chapters show library code, they do not copy it."""
    library = set(anp.__all__)
    for _, code in code_cells(source_path(doc)):
        tree = ast.parse(
            "\n".join(
                line for line in code.splitlines() if not line.startswith(("%", "!"))
            )
        )
        defined = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.ClassDef)
        }
        assert not defined & library, (
            f"{doc} defines {sorted(defined & library)}, which the attncourse "
            f"package already has; show it with show_source() instead"
        )


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
