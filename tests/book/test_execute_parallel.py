"""The book's parallel pre-execution on a tiny book of its own (a few seconds).

A copy of ``book/_ext/execute_parallel.py`` in a temporary project with three
small notebooks (no frameworks): the longest expected chapter starts first, a
failing chapter fails the run with its traceback, a second run finds the
successful chapters in the cache and executes nothing again.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from support.book import ROOT

NOTEBOOK = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# {name}

```{{code-cell}} ipython3
{code}
```
"""


def make_project(tmp_path: Path, chapters: dict, hints: dict) -> Path:
    ext = tmp_path / "book" / "_ext"
    ext.mkdir(parents=True)
    shutil.copy(ROOT / "book" / "_ext" / "execute_parallel.py", ext)
    (ext / "execution_hints.json").write_text(json.dumps(hints))
    for name, code in chapters.items():
        (tmp_path / "book" / f"{name}.md").write_text(
            NOTEBOOK.format(name=name, code=code)
        )
    toc = ["format: jb-book", "root: book/index", "chapters:"]
    toc += [f"- file: book/{name}" for name in chapters]
    (tmp_path / "_toc.yml").write_text("\n".join(toc) + "\n")
    (tmp_path / "book" / "index.md").write_text("# Index\n")
    return ext / "execute_parallel.py"


def run(script: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), "--path-output", str(out), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_longest_first_failures_reported_and_cached_run_executes_nothing(tmp_path):
    chapters = {
        "short": "print('short')",
        "long": "print('long')",
        "broken": "raise ValueError('chapter broken on purpose')",
    }
    script = make_project(
        tmp_path / "project", chapters, {"short": 1, "long": 50, "broken": 5}
    )
    out = tmp_path / "out"
    first = run(script, out)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "longest first: long, broken, short" in first.stderr
    assert "=== FAILED:" in first.stderr and "broken.md" in first.stderr
    assert "chapter broken on purpose" in first.stderr
    assert "executed 2 notebook(s)" in first.stdout

    (tmp_path / "project" / "book" / "broken.md").write_text(
        NOTEBOOK.format(name="broken", code="print('fixed')")
    )
    second = run(script, out)
    assert second.returncode == 0, second.stderr
    assert "executed 1 notebook(s)" in second.stdout
    assert "2 already cached" in second.stdout
    third = run(script, out)
    assert third.returncode == 0 and "3 already cached" in third.stdout
