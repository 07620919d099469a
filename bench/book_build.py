"""What building the book costs: each chapter alone, cold, warm and one-edit builds,
and what each page of the site weighs.

    python bench/book_build.py [--out _build/bench/book_build.json]
        [--chapters NAME,NAME] [--edit NAME] [--skip-serial] [--skip-builds]
        [--keep DIR] [--timeout S]

writes the JSON report and a markdown table beside it (same name, ``.md``) and
prints the table. Everything runs in one process, one stage after the other, so
the ratios between stages come from the same machine state. A full run takes
about 8-10 minutes on two cores.

The project's files are never touched (except with ``--write-hints``, which
saves the chapters' serial seconds to ``book/_ext/execution_hints.json``, the
order in which ``execute_parallel.py`` starts them). The build inputs --
``_config.yml``,
``_toc.yml``, ``book/`` (with the extensions in ``book/_ext``), everything
``_config.yml`` names (logo, favicon, bib files, local extensions) and the
folders the chapters offer as ``{download}`` (``exercises/``) and the assignments
the ``{assignment}`` sections render from (``solutions/``) -- are copied to
a fresh temporary folder, and every stage works on that copy. ``attncourse`` is
installed in the virtual environment, so it imports from anywhere. The copy's
``book/_ext/execute_parallel.py`` finds its root from its own path; that this
root is the copy is checked, and the execution cache is checked to name only
notebooks of the copy.

Stages (targets from the issue "Performance", for a 2-core, 24 GiB machine):

1. **Warm-up**: one Python process imports attncourse, TensorFlow, torch and
   Matplotlib, so the first measured chapter does not pay for a cold disk cache.
2. **Serial** (``--skip-serial`` skips it): every notebook chapter of
   ``_toc.yml`` (``--chapters``: only those) executed alone, one after the
   other, in a fresh kernel by nbclient, on the jupytext-read ``.md`` with the
   working directory ``book/`` -- as a learner runs it, with the default
   threads (no ``OMP_NUM_THREADS``). Per chapter: wall seconds (kernel start to
   shutdown) and the peak RSS of the kernel's whole process tree (the kernel and
   its children: "What attention costs" starts a measuring process), sampled
   every 50 ms (``measure.TreeRSSSampler``). Targets: <= 60 s, <= 2.5 GB.
3. **Cold build** into a fresh ``--path-output`` folder, exactly as ``make
   book``: ``execute_parallel.py --path-output OUT`` then ``jupyter-book build
   ROOT --path-output OUT -W -n --keep-going``. Execution and Sphinx phases are
   timed apart. Target: total <= 0.6 x the serial sum (the execution phase's
   ratio is reported too). Ratios need the serial stage to cover every chapter.
4. **Warm rebuild**: the same two commands again, nothing changed. Target <= 15 s.
5. **One chapter edited**: a code cell ``print("edited")`` is appended to one
   chapter of the copy (``--edit``; default the fastest chapter of the serial
   stage), then the two commands again. Target: <= that chapter's serial time +
   15 s. Without a serial stage that one chapter is executed alone first.
6. **Page weights** of the site the cold build made (``measure.site_weights``):
   per HTML page its bytes, the local images it shows, and its total with the
   CSS / JS / fonts it loads, MathJax apart. Target: no page over 2 MB with its
   images.

The machine's load average is recorded before and after, and the 1-minute
load at the start of every chapter and build: on a shared machine, compare
ratios from one run rather than seconds across runs, and check that the stages
of the run saw similar load. ``--skip-builds``
leaves out stages 3-6. The working folder is deleted at the end unless
``--keep DIR`` names a (new or empty) folder to work in and keep. Exits 1 if a
chapter or a build failed (the report is still written), else 0; missed targets
are reported, not errors.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import yaml
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402  (bench/ is not a package)
from measure import GB, MB, Target, fmt_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# What `make` exports to every process it starts (kernels inherit it).
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONHASHSEED": "0",
}
# Unset for every stage: a learner's kernel uses all cores, and execute_parallel
# sizes its kernels' thread pools itself (it only sets variables not yet set).
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)
SOURCES = ("_config.yml", "_toc.yml", "book")
IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", ".ipynb_checkpoints", "_build", ".jupyter_cache"
)
LIMITS = {
    "chapter_seconds": 60.0,
    "chapter_rss_bytes": 2.5 * GB,
    "cold_ratio": 0.6,
    "warm_seconds": 15.0,
    "edit_extra_seconds": 15.0,
    "page_bytes": 2 * MB,
}
PACKAGES = (
    "torch",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
    "jupyter-book",
    "sphinx",
    "myst-nb",
    "jupyter-cache",
    "nbclient",
    "jupytext",
    "psutil",
)
EDIT_CELL = '\n```{code-cell} ipython3\nprint("edited")\n```\n'
EXECUTED = re.compile(
    r"executed (\d+) notebook\(s\) in ([\d.]+) s; (\d+) already cached"
)
DOWNLOAD = re.compile(r"\{download\}`(?:[^`<]*<([^>`]+)>|([^`]+))`")
ASSIGNMENT = re.compile(r"^```\{assignment\}\s+\S+", re.M)
SAMPLE_SECONDS = 0.05
TAIL = 4000


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


# --- the copy of the book's sources ------


def config_paths(config: dict) -> list[str]:
    """Files and folders ``_config.yml`` names: logo, favicon, bib files and
    the folders of local Sphinx extensions."""
    sphinx = config.get("sphinx") or {}
    html = config.get("html") or {}
    named = [config.get("logo"), html.get("favicon")]
    named += list(config.get("bibtex_bibfiles") or [])
    named += list((sphinx.get("local_extensions") or {}).values())
    return [str(p) for p in named if p]


def download_roots(book: Path, root: Path) -> set[str]:
    """Top-level folders (relative to ``root``) of the files the chapters
    offer with ``{download}``; they live outside ``book/`` (``exercises/``)."""
    found = set()
    for md in book.rglob("*.md"):
        for match in DOWNLOAD.finditer(md.read_text(encoding="utf-8")):
            target = (md.parent / (match.group(1) or match.group(2)).strip()).resolve()
            if target.is_relative_to(root) and not target.is_relative_to(book):
                found.add(target.relative_to(root).parts[0])
    return found


def assignment_roots(book: Path) -> set[str]:
    """``solutions/`` when a chapter renders its Exercise section from an
    assignment (``{assignment} <slug>`` reads solutions/<slug>/<slug>.ipynb)."""
    uses = any(
        ASSIGNMENT.search(md.read_text(encoding="utf-8")) for md in book.rglob("*.md")
    )
    return {"solutions"} if uses else set()


def copy_sources(root: Path, dest: Path) -> list[str]:
    """Copy what ``jupyter-book build`` reads from ``root`` into ``dest``."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    book = root / "book"
    wanted = {
        *SOURCES,
        *config_paths(config),
        *download_roots(book, root),
        *assignment_roots(book),
    }
    copied = []
    for rel in sorted(wanted):
        src, dst = root / rel, dest / rel
        if dst.exists():  # a folder inside one already copied (book/_ext)
            continue
        if src.is_dir():
            shutil.copytree(src, dst, ignore=IGNORE)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        else:
            raise FileNotFoundError(f"_config.yml names {rel}, which does not exist")
        copied.append(rel)
    return copied


def load_execute_parallel(src: Path):
    """The copy's own ``execute_parallel`` module (its ROOT must be the copy)."""
    path = src / "book" / "_ext" / "execute_parallel.py"
    spec = importlib.util.spec_from_file_location("execute_parallel_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toc_notebooks(ep, src: Path) -> list[Path]:
    """The notebook chapters of the copy's ``_toc.yml``, in reading order."""
    paths = [src / f"{name}.md" for name in ep.toc_names(src / "_toc.yml")]
    return [p for p in paths if p.exists() and ep.is_notebook(p)]


def pick_chapters(notebooks: list[Path], names: str | None) -> list[Path]:
    if not names:
        return notebooks
    by_name = {p.stem: p for p in notebooks}
    chosen = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        stem = Path(name).stem
        if stem not in by_name:
            raise SystemExit(
                f"unknown chapter {name!r}; notebook chapters: {', '.join(by_name)}"
            )
        chosen.append(by_name[stem])
    return chosen


# --- stage 2: one chapter alone ------


def run_chapter(path: Path, timeout: int) -> dict:
    """Execute one chapter in a fresh kernel (cwd = its folder), as a learner's
    "Restart and run all"; seconds and the kernel tree's peak RSS."""
    nb = jupytext.read(path)
    kernel = (nb.metadata.get("kernelspec") or {}).get("name", "python3")
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    error = None
    load = round(os.getloadavg()[0], 2)
    # This process's descendants: the kernel nbclient starts and its children.
    with (
        measure.TreeRSSSampler(
            os.getpid(), include_root=False, interval=SAMPLE_SECONDS
        ) as mem,
        measure.Timer() as timer,
    ):
        try:
            client.execute()
        except Exception as exc:  # a failing chapter is reported, not fatal
            error = f"{type(exc).__name__}: {str(exc)[-TAIL:]}"
    return {
        "chapter": path.stem,
        "seconds": round(timer.seconds, 2),
        "code_cells": sum(c.cell_type == "code" for c in nb.cells),
        "ok": error is None,
        "error": error,
        "load_average_1min_at_start": load,
        **mem.result(),
    }


def run_serial(chapters: list[Path], timeout: int) -> list[dict]:
    rows = []
    for path in chapters:
        row = run_chapter(path, timeout)
        log(
            f"  {row['chapter']:28s} {row['seconds']:7.1f} s "
            f"{fmt_bytes(row['peak_rss_bytes']):>9s}"
            + ("" if row["ok"] else "  FAILED")
        )
        rows.append(row)
    return rows


# --- stages 3-5: builds ------


def _phase(run: dict) -> dict:
    """A run_measured result with its output cut to the tail."""
    out = dict(run)
    out["stdout"] = (run.get("stdout") or "")[-TAIL:]
    out["stderr"] = (run.get("stderr") or "")[-TAIL:]
    return out


def build(src: Path, out: Path, timeout: int) -> dict:
    """``make book`` on the copy: execute in parallel, then jupyter-book build.
    The Sphinx phase is skipped if execution fails (make would stop too)."""
    python = sys.executable
    jb = str(Path(python).with_name("jupyter-book"))
    load = round(os.getloadavg()[0], 2)
    execute = _phase(
        measure.run_measured(
            [
                python,
                str(src / "book" / "_ext" / "execute_parallel.py"),
                "--path-output",
                str(out),
            ],
            cwd=src,
            timeout=timeout,
            interval=SAMPLE_SECONDS,
        )
    )
    match = EXECUTED.search(execute["stdout"])
    result = {
        "execute": execute,
        "sphinx": None,
        "load_average_1min_at_start": load,
        "executed_notebooks": int(match.group(1)) if match else None,
        "executor_seconds": float(match.group(2)) if match else None,
        "cached_notebooks": int(match.group(3)) if match else None,
    }
    if execute["returncode"] == 0:
        result["sphinx"] = _phase(
            measure.run_measured(
                [
                    jb,
                    "build",
                    str(src),
                    "--path-output",
                    str(out),
                    "-W",
                    "-n",
                    "--keep-going",
                ],
                cwd=src,
                timeout=timeout,
                interval=SAMPLE_SECONDS,
            )
        )
    sphinx = result["sphinx"]
    result["execute_seconds"] = execute["seconds"]
    result["sphinx_seconds"] = sphinx["seconds"] if sphinx else None
    result["total_seconds"] = round(
        execute["seconds"] + (sphinx["seconds"] if sphinx else 0), 2
    )
    result["ok"] = (
        execute["returncode"] == 0 and bool(sphinx) and sphinx["returncode"] == 0
    )
    result["peak_rss_bytes"] = max(
        execute["peak_rss_bytes"], sphinx["peak_rss_bytes"] if sphinx else 0
    )
    return result


def show_build(label: str, run: dict) -> None:
    sphinx = "–" if run["sphinx_seconds"] is None else f"{run['sphinx_seconds']:.1f}"
    log(
        f"  {label}: execute {run['execute_seconds']:.1f} s "
        f"({run['executed_notebooks']} executed), sphinx {sphinx} s, "
        f"total {run['total_seconds']:.1f} s" + ("" if run["ok"] else "  FAILED")
    )
    if not run["ok"]:
        for phase in ("execute", "sphinx"):
            if run[phase]:
                log(run[phase]["stdout"][-1500:], run[phase]["stderr"][-1500:])


def cache_uris(out: Path) -> list[str]:
    from jupyter_cache import get_cache

    cache = get_cache(str(out / "_build" / ".jupyter_cache"))
    return sorted(record.uri for record in cache.list_project_records())


def cached_seconds(out: Path) -> dict[str, float | None]:
    """chapter -> execution seconds the cache recorded for it (one kernel of
    the parallel executor; kernel start included)."""
    from jupyter_cache import get_cache

    cache = get_cache(str(out / "_build" / ".jupyter_cache"))
    times = {}
    for record in cache.list_project_records():
        try:
            cached = cache.get_cached_project_nb(record.uri)
        except Exception:  # unreadable record: leave it out of the report
            cached = None
        data = (cached.data or {}) if cached is not None else {}
        seconds = data.get("execution_seconds")
        times[Path(record.uri).stem] = None if seconds is None else round(seconds, 2)
    return times


def edit_chapter(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.rstrip("\n") + "\n" + EDIT_CELL, encoding="utf-8")


# --- targets and the report ------


def seconds(x: float) -> str:
    return f"{x:.1f}"


def targets(report: dict) -> list[Target]:
    """Every target of the issue, measured or n/a."""
    out = []
    serial = report.get("serial") or {}
    rows = [r for r in serial.get("chapters", []) if r["ok"]]
    if rows:
        slow = max(rows, key=lambda r: r["seconds"])
        big = max(rows, key=lambda r: r["peak_rss_bytes"])
        out.append(
            Target(
                f"slowest chapter alone ({slow['chapter']})",
                slow["seconds"],
                LIMITS["chapter_seconds"],
                "s",
                fmt=seconds,
            )
        )
        out.append(
            Target(
                f"largest chapter peak RSS ({big['chapter']})",
                big["peak_rss_bytes"],
                LIMITS["chapter_rss_bytes"],
                fmt=fmt_bytes,
                note="kernel + its child processes",
            )
        )
    else:
        out.append(
            Target(
                "slowest chapter alone",
                None,
                LIMITS["chapter_seconds"],
                "s",
                fmt=seconds,
                note="serial stage not run",
            )
        )
        out.append(
            Target(
                "largest chapter peak RSS",
                None,
                LIMITS["chapter_rss_bytes"],
                fmt=fmt_bytes,
            )
        )
    builds = report.get("builds") or {}
    cold, warm, edit = builds.get("cold"), builds.get("warm"), builds.get("edit")
    total = serial.get("sum_seconds")
    complete = bool(serial.get("all_chapters")) and all(
        r["ok"] for r in serial.get("chapters", [])
    )
    why = "" if complete else "needs the serial stage over every chapter"
    if total is not None:
        out.append(
            Target(
                "serial sum (all chapters alone)"
                if complete
                else "serial sum (chapters run)",
                total,
                None,
                "s",
                fmt=seconds,
                note=f"{len(serial['chapters'])} chapter(s)",
            )
        )
    if cold:
        ok = cold["ok"]
        ratio_exec = cold["execute_seconds"] / total if complete and total else None
        ratio_total = cold["total_seconds"] / total if complete and total else None
        note = (
            f"execute {cold['execute_seconds']:.1f} s + sphinx "
            f"{cold['sphinx_seconds'] or 0:.1f} s"
            if ok
            else "build FAILED"
        )
        out.append(
            Target(
                "cold build total",
                cold["total_seconds"] if ok else None,
                None,
                "s",
                fmt=seconds,
                note=note,
            )
        )
        out.append(
            Target(
                "cold execution phase / serial sum",
                ratio_exec,
                None,
                fmt=".2f",
                note=why or "informational",
            )
        )
        out.append(
            Target(
                "cold build total / serial sum",
                ratio_total,
                LIMITS["cold_ratio"],
                fmt=".2f",
                note=why,
            )
        )
    if warm:
        note = (
            f"execute {warm['execute_seconds']:.1f} s + sphinx "
            f"{warm['sphinx_seconds'] or 0:.1f} s"
            if warm["ok"]
            else "build FAILED"
        )
        out.append(
            Target(
                "warm rebuild (nothing changed)",
                warm["total_seconds"] if warm["ok"] else None,
                LIMITS["warm_seconds"],
                "s",
                fmt=seconds,
                note=note,
            )
        )
    if edit:
        limit = None
        if edit.get("chapter_serial_seconds") is not None:
            limit = edit["chapter_serial_seconds"] + LIMITS["edit_extra_seconds"]
        if not edit["ok"]:
            note = "build FAILED"
        else:
            alone = (
                "its run alone failed"
                if limit is None
                else f"alone {edit['chapter_serial_seconds']:.1f} s + "
                f"{LIMITS['edit_extra_seconds']:.0f} s"
            )
            note = (
                f"{edit['chapter']}: {alone}; execute "
                f"{edit['execute_seconds']:.1f} s + sphinx "
                f"{edit['sphinx_seconds'] or 0:.1f} s"
            )
        out.append(
            Target(
                "rebuild after editing one chapter",
                edit["total_seconds"] if edit["ok"] else None,
                limit,
                "s",
                fmt=seconds,
                note=note,
            )
        )
    site = report.get("site")
    if site and site["pages"]:
        top = site["pages"][0]
        out.append(
            Target(
                f"largest page with its images ({top['page']})",
                top["page_with_images_bytes"],
                LIMITS["page_bytes"],
                fmt=fmt_bytes,
                note=f"{top['n_images']} images; with CSS/JS/fonts/"
                f"MathJax {fmt_bytes(top['total_bytes'])}",
            )
        )
    return out


def chapter_status(row: dict) -> str:
    """pass / MISS against both per-chapter limits, or FAILED."""
    if not row["ok"]:
        return "FAILED"
    ok = (
        row["seconds"] <= LIMITS["chapter_seconds"]
        and row["peak_rss_bytes"] <= LIMITS["chapter_rss_bytes"]
    )
    return "pass" if ok else "MISS"


def markdown(report: dict, checks: list[Target]) -> str:
    m = report["machine"]
    v = m["versions"]
    tf = v.get("tensorflow") or v.get("tensorflow-cpu")
    lines = [
        f"# Book build performance ({m['timestamp']})",
        "",
        f"{m['cpu_count']} cores, {m['memory_total_bytes'] / 2**30:.1f} GiB RAM, "
        f"Python {m['python']}, torch {v.get('torch')}, TensorFlow {tf}, "
        f"jupyter-book {v.get('jupyter-book')}. Load average (1/5/15 min) "
        f"before {m['load_average_1_5_15min']}, after "
        f"{report['load_average_after']}.",
        "",
        measure.targets_table(checks),
    ]
    serial = (report.get("serial") or {}).get("chapters")
    cold = (report.get("builds") or {}).get("cold") or {}
    parallel = cold.get("chapter_seconds") or {}
    if serial:
        rows = []
        for r in serial:
            in_build = parallel.get(r["chapter"])
            rows.append(
                [
                    r["chapter"],
                    f"{r['seconds']:.1f}",
                    "" if in_build is None else f"{in_build:.1f}",
                    fmt_bytes(r["peak_rss_bytes"]),
                    r["peak_processes"],
                    fmt_bytes(r["hwm_sum_bytes"]),
                    r.get("load_average_1min_at_start"),
                    chapter_status(r),
                ]
            )
        lines += [
            "Each chapter alone in a fresh kernel (all cores' threads). "
            "'in cold build': its execution time in the parallel executor "
            "(one kernel per core, one thread each), from the cache. Peak "
            "RSS: kernel + children, sampled every "
            f"{int(SAMPLE_SECONDS * 1000)} ms; 'sum of VmHWM' adds each "
            "process's own high-water mark (an upper bound).",
            "",
            measure.markdown_table(
                [
                    "chapter",
                    "seconds",
                    "in cold build",
                    "peak RSS",
                    "processes at peak",
                    "sum of VmHWM",
                    "load at start",
                    "≤ 60 s, ≤ 2.5 GB",
                ],
                rows,
                align="lrrrrrrc",
            ),
        ]
    builds = report.get("builds") or {}
    if builds:
        rows = []
        for label, run in builds.items():
            sphinx = run["sphinx_seconds"]
            rows.append(
                [
                    label,
                    run["executed_notebooks"],
                    f"{run['execute_seconds']:.1f}",
                    "–" if sphinx is None else f"{sphinx:.1f}",
                    f"{run['total_seconds']:.1f}",
                    fmt_bytes(run["peak_rss_bytes"]),
                    run.get("load_average_1min_at_start"),
                    "ok" if run["ok"] else "FAILED",
                ]
            )
        lines += [
            "Builds of a copy of the sources into a temporary folder "
            "(`execute_parallel.py`, then `jupyter-book build -W -n "
            "--keep-going`).",
            "",
            measure.markdown_table(
                [
                    "build",
                    "notebooks executed",
                    "execute s",
                    "sphinx s",
                    "total s",
                    "peak RSS",
                    "load at start",
                    "result",
                ],
                rows,
                align="lrrrrrrc",
            ),
        ]
    site = report.get("site")
    if site and site["pages"]:
        rows = [
            [
                p["page"],
                fmt_bytes(p["html_bytes"]),
                p["n_images"],
                fmt_bytes(p["images_bytes"]),
                fmt_bytes(p["page_with_images_bytes"]),
                fmt_bytes(p["css_bytes"]),
                fmt_bytes(p["js_bytes"]),
                fmt_bytes(p["fonts_bytes"]),
                fmt_bytes(p["mathjax_bytes"]),
                fmt_bytes(p["total_bytes"]),
            ]
            for p in site["pages"][:6]
        ]
        mj = site.get("mathjax")
        lazy = (
            f" MathJax loads more by itself (fonts for the glyphs used, TeX "
            f"extensions): at most {fmt_bytes(mj['lazy_upper_bytes'])} "
            f"({mj['font_files']} font files, {fmt_bytes(mj['font_bytes'])})."
            if mj
            else ""
        )
        lines += [
            f"Largest of {len(site['pages'])} pages (whole site "
            f"{fmt_bytes(site['site_bytes'])}). Fonts: every @font-face of "
            "the page's CSS (an upper bound)." + lazy,
            "",
            measure.markdown_table(
                [
                    "page",
                    "HTML",
                    "images",
                    "image bytes",
                    "HTML + images",
                    "CSS",
                    "JS",
                    "fonts",
                    "MathJax entry",
                    "total",
                ],
                rows,
                align="lrrrrrrrrr",
            ),
        ]
        shared = [a for a in site.get("assets", []) if a["group"] != "images"][:6]
        if shared:
            lines += [
                "Largest files the pages load besides their images:",
                "",
                measure.markdown_table(
                    ["file", "kind", "bytes", "pages loading it"],
                    [
                        [a["file"], a["group"], fmt_bytes(a["bytes"]), a["pages"]]
                        for a in shared
                    ],
                    align="llrr",
                ),
            ]
    return "\n".join(lines)


# --- main ------


def prepare_workdir(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix="book-build-bench-"))
    keep = keep.resolve()
    if keep.exists() and any(keep.iterdir()):
        raise SystemExit(f"--keep {keep}: the folder must be new or empty")
    keep.mkdir(parents=True, exist_ok=True)
    return keep


def write_hints(seconds: dict) -> None:
    """Merge measured chapter seconds into the build's execution hints."""
    path = ROOT / "book" / "_ext" / "execution_hints.json"
    try:
        hints = json.loads(path.read_text())
    except (OSError, ValueError):
        hints = {}
    hints.update({name: round(s, 1) for name, s in seconds.items()})
    path.write_text(json.dumps(dict(sorted(hints.items())), indent=1) + "\n")
    log(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("_build/bench/book_build.json")
    )
    parser.add_argument(
        "--chapters",
        help="comma-separated chapter names (e.g. "
        "self-attention,builtin-layers) for the serial stage; "
        "default all notebook chapters of _toc.yml",
    )
    parser.add_argument(
        "--edit", help="the chapter to edit (default: the fastest of the serial stage)"
    )
    parser.add_argument(
        "--skip-serial", action="store_true", help="leave out the chapters-alone stage"
    )
    parser.add_argument(
        "--skip-builds",
        action="store_true",
        help="leave out the cold / warm / edit builds and weights",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="work in DIR (new or empty) and keep it",
    )
    parser.add_argument(
        "--write-hints",
        action="store_true",
        help="save each chapter's serial seconds to "
        "book/_ext/execution_hints.json (the order in which "
        "a cold build starts the chapters: longest first)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=300,
        help="seconds per cell (as _config.yml), default 300",
    )
    args = parser.parse_args(argv)

    os.environ.update(QUIET_ENV)
    removed = {var: os.environ.pop(var) for var in THREAD_VARS if var in os.environ}
    started = time.perf_counter()
    report = {
        "machine": measure.machine_info(PACKAGES),
        "settings": {
            "env": QUIET_ENV,
            "thread_vars_removed": removed,
            "cell_timeout_seconds": args.timeout,
            "rss_sample_seconds": SAMPLE_SECONDS,
            "limits": LIMITS,
            "chapters_option": args.chapters,
        },
    }
    work = prepare_workdir(args.keep)
    src, out = work / "src", work / "out"
    failed = False
    try:
        copied = copy_sources(ROOT, src)
        ep = load_execute_parallel(src)
        root_ok = Path(ep.ROOT).resolve() == src.resolve()
        report["sources"] = {
            "copied": copied,
            "workdir": str(work),
            "execute_parallel_root": str(ep.ROOT),
            "root_is_copy": root_ok,
        }
        if not root_ok:
            raise SystemExit(
                f"execute_parallel.py in the copy resolves ROOT to "
                f"{ep.ROOT}, not {src}: the build would use the project"
            )
        notebooks = toc_notebooks(ep, src)
        chosen = pick_chapters(notebooks, args.chapters)
        log(
            f"working in {work}; copied {', '.join(copied)}; "
            f"{len(notebooks)} notebook chapters"
        )

        log("warm-up: importing attncourse, tensorflow, torch, matplotlib")
        warm_up = measure.run_measured(
            [
                sys.executable,
                "-c",
                "import attncourse, tensorflow, torch, matplotlib.pyplot",
            ]
        )
        report["warm_up_seconds"] = warm_up["seconds"]

        serial_by = {}
        if not args.skip_serial:
            log(f"serial: {len(chosen)} chapter(s), each alone in a fresh kernel")
            rows = run_serial(chosen, args.timeout)
            serial_by = {r["chapter"]: r for r in rows}
            failed |= not all(r["ok"] for r in rows)
            report["serial"] = {
                "chapters": rows,
                "sum_seconds": round(sum(r["seconds"] for r in rows), 2),
                "all_chapters": len(rows) == len(notebooks),
            }
            if args.write_hints:
                write_hints({r["chapter"]: r["seconds"] for r in rows if r["ok"]})

        if not args.skip_builds:
            builds = report["builds"] = {}
            log("cold build")
            builds["cold"] = cold = build(src, out, 3600)
            show_build("cold", cold)
            uris = cache_uris(out) if cold["execute"]["returncode"] == 0 else []
            report["sources"]["cache_uris_in_copy"] = bool(uris) and all(
                Path(u).resolve().is_relative_to(src.resolve()) for u in uris
            )
            if uris:
                cold["chapter_seconds"] = cached_seconds(out)
            html = out / "_build" / "html"
            if (html / "index.html").is_file():
                report["site"] = measure.site_weights(html)
            log("warm rebuild")
            builds["warm"] = build(src, out, 3600)
            show_build("warm", builds["warm"])

            ok_rows = [r for r in serial_by.values() if r["ok"]]
            name = args.edit or (
                min(ok_rows, key=lambda r: r["seconds"])["chapter"]
                if ok_rows
                else min(notebooks, key=lambda p: len(jupytext.read(p).cells)).stem
            )
            (target,) = pick_chapters(notebooks, name)
            if name not in serial_by or not serial_by[name]["ok"]:
                log(f"executing {name} alone, for the edit target's limit")
                serial_by[name] = run_chapter(target, args.timeout)
                report["edit_chapter_alone"] = serial_by[name]
            log(f"rebuild after editing {name}")
            edit_chapter(target)
            builds["edit"] = edit = build(src, out, 3600)
            edit["chapter"] = name
            edit["chapter_serial_seconds"] = (
                serial_by[name]["seconds"] if serial_by[name]["ok"] else None
            )
            show_build("edit", edit)
            failed |= not all(b["ok"] for b in builds.values())
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["seconds"] = round(time.perf_counter() - started, 1)
    checks = targets(report)
    report["targets"] = [t.as_dict() for t in checks]
    table = markdown(report, checks)
    measure.write_report(args.out, report, table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
