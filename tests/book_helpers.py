"""Read the book's sources and its built HTML (used by test_book*.py)."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK_TAGS = ("tensorflow", "pytorch")


def toc_files() -> list[str]:
    """Every document named in _toc.yml, in reading order (without suffix)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


def source_path(doc: str) -> Path:
    for suffix in (".md", ".ipynb"):
        path = ROOT / f"{doc}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(doc)


def is_notebook(path: Path) -> bool:
    """A MyST Markdown notebook: jupytext front matter with a kernelspec."""
    text = path.read_text()
    return text.startswith("---\n") and "kernelspec:" in text.split("\n---\n")[0]


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
