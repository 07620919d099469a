"""The book-build benchmark's pure parts: page weights, the process-tree RSS
sampler, targets and tables, the source copy (fast; no timing asserts)."""

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import book_build  # noqa: E402
import measure  # noqa: E402
from measure import MB, Target  # noqa: E402

# --- page weights on a tiny fake site ---


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


@pytest.fixture
def fake_site(tmp_path) -> Path:
    root = tmp_path / "html"
    write(
        root / "_static" / "theme.css",
        '@import url("base.css");\n'
        "/* @font-face { src: url(commented.woff2) } */\n"
        "@font-face { font-family: A; src: url(fonts/a.woff2) format('woff2'),"
        " url(fonts/a.ttf) format('truetype'); }\n"
        "body { background: url(bg.png); }\n",
    )
    write(root / "_static" / "base.css", "@font-face{src:url('fonts/b.woff')}\n")
    write(root / "_static" / "fonts" / "a.woff2", b"a" * 300)
    write(root / "_static" / "fonts" / "a.ttf", b"t" * 5000)
    write(root / "_static" / "fonts" / "b.woff", b"b" * 70)
    write(root / "_static" / "fonts" / "c.woff2", b"c" * 11)
    write(root / "_static" / "app.js", b"j" * 1000)
    write(root / "_static" / "mathjax" / "tex-chtml.js", b"m" * 4000)
    write(root / "_static" / "mathjax" / "output" / "fonts" / "x.woff", b"x" * 600)
    write(root / "_images" / "fig.png", b"p" * 20000)
    write(root / "_images" / "big.png", b"q" * (3 * MB))
    head = (
        '<link rel="stylesheet" href="{up}_static/theme.css?digest=abc">'
        '<link rel="preload" as="font" href="{up}_static/fonts/c.woff2">'
        '<link rel="preload" as="script" href="{up}_static/app.js">'
        '<script src="{up}_static/app.js"></script>'
    )
    write(
        root / "index.html",
        "<html><head>"
        + head.format(up="")
        + '<script src="_static/mathjax/tex-chtml.js"></script></head><body>'
        '<img src="_images/fig.png"><img src="_images/fig.png#again">'
        '<img src="data:image/png;base64,AAAA">'
        '<img src="https://example.org/x.png"></body></html>',
    )
    write(
        root / "book" / "chapter.html",
        "<html><head>"
        + head.format(up="../")
        + '</head><body><img src="../_images/big.png">'
        '<img src="/_images/fig.png"><img src="../_images/gone.png"></body></html>',
    )
    write(root / "_static" / "ignored.html", "<html></html>")
    return root


def test_page_weight_counts_each_group_once(fake_site):
    index = measure.page_weight(fake_site / "index.html", fake_site)
    assert index["html_bytes"] == (fake_site / "index.html").stat().st_size
    assert index["images_bytes"] == 20000 and index["n_images"] == 1
    assert index["page_with_images_bytes"] == index["html_bytes"] + 20000
    assert index["css_bytes"] == sum(
        (fake_site / "_static" / f).stat().st_size for f in ("theme.css", "base.css")
    )
    # first src of each @font-face (woff2, not ttf) + the preloaded font
    assert index["fonts_bytes"] == 300 + 70 + 11
    assert index["js_bytes"] == 1000  # preload + script: one file
    assert index["mathjax_bytes"] == 4000 and index["loads_mathjax"]
    assert index["total_bytes"] == sum(
        index[f"{k}_bytes"] for k in ("html", "images", "css", "js", "fonts", "mathjax")
    )
    assert index["external"] == ["https://example.org/x.png"]
    assert index["missing"] == []


def test_page_weight_resolves_relative_and_absolute_urls(fake_site):
    page = measure.page_weight(fake_site / "book" / "chapter.html", fake_site)
    assert page["page"] == "book/chapter.html"
    assert page["images_bytes"] == 3 * MB + 20000 and page["n_images"] == 3
    assert page["missing"] == ["_images/gone.png"]
    assert not page["loads_mathjax"] and page["mathjax_bytes"] == 0
    assert page["js_bytes"] == 1000


def test_site_weights_sorts_pages_and_sizes_mathjax(fake_site):
    site = measure.site_weights(fake_site)
    assert [p["page"] for p in site["pages"]] == ["book/chapter.html", "index.html"]
    mj = site["mathjax"]
    assert mj["entry_bytes"] == 4000 and mj["lazy_upper_bytes"] == 600
    assert mj["font_files"] == 1 and mj["font_bytes"] == 600
    assert site["site_bytes"] > 3 * MB
    assets = {a["file"]: a for a in site["assets"]}
    assert site["assets"][0]["file"] == "_images/big.png"
    assert assets["_static/app.js"] == {
        "file": "_static/app.js",
        "group": "js",
        "pages": 2,
        "bytes": 1000,
    }
    assert assets["_images/gone.png"]["bytes"] is None
    assert "_static/fonts/a.ttf" not in assets


# --- the RSS sampler ---

ALLOCATE = textwrap.dedent("""
    import sys, time
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    block = bytearray(200 * 1000 * 1000)   # zero-filled: every page is touched
    sys.stdout.write("allocated\\n"); sys.stdout.flush()
    sys.stdin.readline()
""")


def test_sampler_sees_a_grandchild_allocate(tmp_path):
    """The allocating process is a grandchild: descendants are counted."""
    script = write(tmp_path / "allocate.py", ALLOCATE)
    outer = [
        sys.executable,
        "-c",
        "import subprocess, sys; "
        f"sys.exit(subprocess.call([sys.executable, {str(script)!r}]))",
    ]
    proc = subprocess.Popen(
        outer, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        sampler = measure.TreeRSSSampler(proc.pid, interval=0.02)
        baseline = sampler.sample()
        with sampler:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "allocated\n"
            sampler.sample()
            proc.stdin.write("done\n")
            proc.stdin.flush()
            proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            measure.kill_tree(proc.pid)
    assert sampler.peak_bytes - baseline >= 150 * MB
    assert sampler.peak_processes == 2 and sampler.max_processes == 2
    assert sampler.samples >= 3
    if sampler.hwm_sum_bytes is not None:  # Linux
        assert sampler.hwm_sum_bytes >= sampler.peak_bytes * 0.9
    result = sampler.result()
    assert result["peak_rss_bytes"] == sampler.peak_bytes


def test_sampler_without_root_counts_only_descendants():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        without_root = measure.TreeRSSSampler(proc.pid, include_root=False)
        assert without_root.sample() == 0 and without_root.max_processes == 0
        with_root = measure.TreeRSSSampler(proc.pid)
        assert with_root.sample() > 0 and with_root.max_processes == 1
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    gone = measure.TreeRSSSampler(proc.pid)  # exited: nothing to count
    assert gone.sample() == 0


def test_run_measured_reports_exit_code_and_output():
    run = measure.run_measured(
        [sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"]
    )
    assert run["returncode"] == 3 and run["stdout"] == "hi\n"
    assert run["seconds"] > 0 and run["peak_rss_bytes"] > 0


def test_timer_measures_a_block():
    before = time.perf_counter()
    with measure.Timer() as timer:
        time.sleep(0.05)
        running = timer.seconds  # the time so far while the block runs
    outside = time.perf_counter() - before
    done = timer.seconds
    # At least the sleep, at most the time around the block; frozen at exit.
    assert 0.05 <= running <= done <= outside and timer.end is not None
    time.sleep(0.02)
    assert timer.seconds == done


# --- targets and tables ---


def test_target_status():
    assert Target("t", 10, 15).status == "pass"
    assert Target("t", 15, 15).status == "pass"
    assert Target("t", 15.01, 15).status == "MISS"
    assert Target("t", 3, 2, kind="min").status == "pass"
    assert Target("t", 1, 2, kind="min").status == "MISS"
    assert Target("t", None, 2).status == "n/a"
    assert Target("t", 1, None).status == "info"
    assert Target("t", None, None).status == "n/a"
    row = Target("warm", 12.345, 15, "s", fmt=".1f").row()
    assert row == ["warm", "12.3 s", "≤ 15.0 s", "pass", ""]
    assert Target("m", 2.6e9, 2.5e9, fmt=measure.fmt_bytes).row()[1:4] == [
        "2.6 GB",
        "≤ 2.5 GB",
        "MISS",
    ]
    assert "fmt" not in Target("t", 1, 2).as_dict()


def test_markdown_tables():
    table = measure.markdown_table(["a", "b"], [["x|y", None], [1, 2.5]], align="lr")
    assert table.splitlines() == [
        "| a | b |",
        "| :--- | ---: |",
        "| x\\|y |  |",
        "| 1 | 2.5 |",
    ]
    text = measure.targets_table([Target("cold", 0.5, 0.6), Target("x", 1, None)])
    assert "| cold | 0.50 | ≤ 0.60 | pass |" in text and "| info |" in text


def test_fmt_bytes():
    assert measure.fmt_bytes(None) == "–"
    assert measure.fmt_bytes(999) == "999 B"
    assert measure.fmt_bytes(2_500_000) == "2.5 MB"
    assert measure.fmt_bytes(2.5e9) == "2.5 GB"


def test_machine_info_names_versions():
    info = measure.machine_info(("psutil", "no-such-distribution-xyz"))
    assert info["cpu_count"] >= 1 and len(info["load_average_1_5_15min"]) == 3
    assert (
        info["versions"]["psutil"]
        and info["versions"]["no-such-distribution-xyz"] is None
    )


def chapter(name, seconds, rss, ok=True):
    return {"chapter": name, "seconds": seconds, "peak_rss_bytes": rss, "ok": ok}


def build_run(execute, sphinx, ok=True):
    return {
        "execute_seconds": execute,
        "sphinx_seconds": sphinx,
        "total_seconds": execute + sphinx,
        "ok": ok,
    }


def test_book_targets_pass_and_miss():
    report = {
        "serial": {
            "chapters": [chapter("a", 20, 1e9), chapter("b", 70, 3e9)],
            "sum_seconds": 90,
            "all_chapters": True,
        },
        "builds": {
            "cold": build_run(40, 20),
            "warm": build_run(2, 10),
            "edit": {**build_run(15, 12), "chapter": "a", "chapter_serial_seconds": 20},
        },
        "site": {
            "pages": [
                {
                    "page": "big.html",
                    "page_with_images_bytes": 2.5 * MB,
                    "n_images": 4,
                    "total_bytes": 4 * MB,
                }
            ]
        },
    }
    by = {t.name.split(" (")[0]: t for t in book_build.targets(report)}
    assert by["slowest chapter alone"].status == "MISS"  # 70 s > 60 s
    assert by["largest chapter peak RSS"].status == "MISS"  # 3 GB > 2.5 GB
    assert by["cold build total / serial sum"].value == pytest.approx(60 / 90)
    assert by["cold build total / serial sum"].status == "MISS"  # 0.67 > 0.6
    assert by["cold execution phase / serial sum"].value == pytest.approx(40 / 90)
    assert by["warm rebuild"].status == "pass"  # 12 s
    assert by["rebuild after editing one chapter"].limit == 35
    assert by["rebuild after editing one chapter"].status == "pass"  # 27 s
    assert by["largest page with its images"].status == "MISS"
    assert book_build.chapter_status(report["serial"]["chapters"][0]) == "pass"
    assert book_build.chapter_status(report["serial"]["chapters"][1]) == "MISS"
    assert book_build.chapter_status(chapter("c", 1, 1, ok=False)) == "FAILED"


def test_ratios_need_every_chapter():
    report = {
        "serial": {
            "chapters": [chapter("a", 20, 1e9)],
            "sum_seconds": 20,
            "all_chapters": False,
        },
        "builds": {"cold": build_run(5, 5)},
    }
    by = {t.name: t for t in book_build.targets(report)}
    assert by["cold build total / serial sum"].status == "n/a"
    assert "every chapter" in by["cold build total / serial sum"].note


def test_failed_builds_have_no_value():
    report = {"builds": {"warm": build_run(1, 1, ok=False)}}
    (warm,) = [t for t in book_build.targets(report) if t.name.startswith("warm")]
    assert warm.value is None and warm.status == "n/a"
    edit = {**build_run(10, 10), "chapter": "a", "chapter_serial_seconds": None}
    (target,) = book_build.targets({"builds": {"edit": edit}})[2:]
    assert target.status == "info" and "alone failed" in target.note


# --- the copy of the sources ---


def test_copy_sources_takes_config_extensions_and_downloads(tmp_path):
    root = tmp_path / "project"
    write(
        root / "_config.yml",
        "sphinx:\n  local_extensions:\n    ext: book/_ext\n"
        "bibtex_bibfiles:\n  - refs.bib\n",
    )
    write(root / "_toc.yml", "format: jb-book\nroot: book/index\n")
    write(root / "refs.bib", "")
    write(root / "book" / "index.md", "{download}`x.ipynb <../extra/x.ipynb>`\n")
    write(root / "book" / "_ext" / "ext.py", "")
    write(root / "book" / "__pycache__" / "junk.pyc", b"")
    write(root / "extra" / "x.ipynb", "{}")
    write(root / "secret" / "not-copied.txt", "")
    dest = tmp_path / "copy"
    copied = book_build.copy_sources(root, dest)
    assert set(copied) == {"_config.yml", "_toc.yml", "book", "extra", "refs.bib"}
    assert (dest / "book" / "_ext" / "ext.py").is_file()
    assert (dest / "extra" / "x.ipynb").is_file()
    assert not (dest / "secret").exists()
    assert not (dest / "book" / "__pycache__").exists()


def test_copy_sources_takes_the_assignments_the_exercise_sections_render(tmp_path):
    # the {assignment} directive reads solutions/<slug>/<slug>.ipynb: without
    # it the benchmark's copy failed to build (bench-build reported FAILED)
    root = tmp_path / "project"
    write(root / "_config.yml", "title: t\n")
    write(root / "_toc.yml", "format: jb-book\nroot: book/index\n")
    write(root / "book" / "index.md", "## Exercise\n\n```{assignment} demo\n```\n")
    write(root / "solutions" / "demo" / "demo.ipynb", "{}")
    copied = book_build.copy_sources(root, tmp_path / "copy")
    assert "solutions" in copied
    assert (tmp_path / "copy" / "solutions" / "demo" / "demo.ipynb").is_file()
    write(root / "book" / "index.md", "no exercise\n")
    assert "solutions" not in book_build.copy_sources(root, tmp_path / "again")


def test_copied_execute_parallel_resolves_root_to_the_copy(tmp_path):
    dest = tmp_path / "copy"
    book_build.copy_sources(book_build.ROOT, dest)
    ep = book_build.load_execute_parallel(dest)
    assert Path(ep.ROOT).resolve() == dest.resolve()
    notebooks = book_build.toc_notebooks(ep, dest)
    assert notebooks and all(p.is_relative_to(dest) for p in notebooks)
    assert (
        book_build.pick_chapters(notebooks, "self-attention")[0].stem
        == "self-attention"
    )
    with pytest.raises(SystemExit):
        book_build.pick_chapters(notebooks, "no-such-chapter")


def test_edit_appends_a_code_cell(tmp_path):
    import jupytext

    path = write(
        tmp_path / "ch.md",
        "---\njupytext:\n  text_representation:\n"
        "    extension: .md\n    format_name: myst\nkernelspec:\n"
        "  name: python3\n  display_name: Python 3\n---\n\n# T\n\n"
        "```{code-cell} ipython3\nx = 1\n```\n",
    )
    book_build.edit_chapter(path)
    cells = jupytext.read(path).cells
    assert [c.cell_type for c in cells if c.cell_type == "code"] == ["code"] * 2
    assert cells[-1].source == 'print("edited")'
