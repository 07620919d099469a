"""Read the book's sources and its built HTML (used by test_book*.py)."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from execute_parallel import is_notebook, toc_names  # noqa: E402  (the build's own)

FRAMEWORK_TAGS = ("tensorflow", "pytorch")


def toc_files() -> list[str]:
    """Every document named in _toc.yml, in reading order (without suffix)."""
    return toc_names(ROOT / "_toc.yml")


def source_path(doc: str) -> Path:
    for suffix in (".md", ".ipynb"):
        path = ROOT / f"{doc}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(doc)


CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def code_cells(path: Path) -> list[tuple[list[str], str]]:
    """(tags, code) of every code cell in a MyST notebook."""
    cells = []
    for body in CELL.findall(path.read_text()):
        tags: list[str] = []
        lines = body.splitlines()
        while lines and lines[0].startswith(":"):
            key, _, value = lines.pop(0)[1:].partition(":")
            if key.strip() == "tags":
                tags = [t.strip(" '\"") for t in value.strip(" []").split(",")]
        cells.append((tags, "\n".join(lines)))
    return cells


def chapters() -> list[str]:
    """Documents in the toc that are executable notebooks."""
    return [doc for doc in toc_files() if is_notebook(source_path(doc))]
