"""The session-wide built book shared by the site and browser tests."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.book import ROOT


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    out = Path(os.environ.get("BOOK_TEST_OUTPUT") or tmp_path_factory.mktemp("book"))
    jb = Path(sys.executable).with_name("jupyter-book")
    start = time.perf_counter()
    execute = subprocess.run(
        [
            sys.executable,
            str(ROOT / "book" / "_ext" / "execute_parallel.py"),
            "--path-output",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    if execute.returncode != 0:
        pytest.fail(f"executing the chapters failed:\n{execute.stderr[-8000:]}")
    proc = subprocess.run(
        [
            str(jb),
            "build",
            str(ROOT),
            "--path-output",
            str(out),
            "-W",
            "-n",
            "--keep-going",
        ],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    html = out / "_build" / "html"
    if proc.returncode != 0:
        reports = sorted((out / "_build" / "html" / "reports").rglob("*.err.log"))
        details = "\n".join(p.read_text()[-3000:] for p in reports)
        pytest.fail(
            f"book build failed (exit {proc.returncode}) after {seconds:.0f}s\n"
            f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}\n{details}"
        )
    (html.parent / "build-seconds.txt").write_text(f"{seconds:.1f}\n")
    print(f"\nclean book build with execution: {seconds:.1f} s")
    # The Chinese edition, as `make book` builds it: from the English execution
    # cache (it executes nothing) into html/zh; its own timing in zh-report/.
    zh = subprocess.run(
        [
            sys.executable,
            str(ROOT / "book" / "_ext" / "zh_edition.py"),
            "build",
            "--path-output",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    if zh.returncode != 0:
        pytest.fail(
            f"the Chinese edition failed to build (exit {zh.returncode})\n"
            f"{zh.stdout[-6000:]}\n{zh.stderr[-6000:]}"
        )
    extra = (out / "_build" / "zh-report" / "build-seconds.txt").read_text().strip()
    print(f"Chinese edition from the cache: {extra} s more")
    return html
