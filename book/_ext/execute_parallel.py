"""Execute the book's notebooks in parallel into Jupyter Book's execution cache.

Jupyter Book 1 (myst-nb, ``execute_notebooks: cache``) executes notebooks one at a
time while Sphinx reads them. Run this first and every chapter that changed is
executed by jupyter-cache's multiprocessing executor (one process per CPU core);
the Sphinx build then finds each notebook in the cache and executes nothing.
Unchanged chapters are cache hits here too, so a warm run costs only the hashing.

The longest chapters start first, one notebook at a time per process (jupyter-
cache's own executor hands out the notebooks in pairs, in toc order, which left
one core idle for the last ~12 s of a cold build). How long a chapter takes is
read from the cache (its last execution, even of an older version), else from
``execution_hints.json`` beside this file (seconds per chapter, as measured by
``bench/book_build.py --write-hints``); the order only affects speed.

    python book/_ext/execute_parallel.py [--path-output DIR] [--toc FILE] [--timeout S]

Exits non-zero, printing each failing notebook's traceback, if any chapter fails.
"""

import argparse
import json
import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path

import attncourse._startup  # noqa: F401  (skips a slow unused import)

# isort: split

import yaml  # noqa: E402
from jupyter_cache import get_cache  # noqa: E402
from jupyter_cache.cache.db import NbProjectRecord  # noqa: E402
from jupyter_cache.cache.main import JupyterCacheBase  # noqa: E402
from jupyter_cache.executors.basic import (  # noqa: E402
    REPORT_LEVEL,
    ExecutionWorkerLocalMProc,
    ExecutorRunResult,
    ProcessData,
)

ROOT = Path(__file__).resolve().parents[2]
READER = {"type": "plugin", "name": "myst_nb_md"}  # how myst-nb registers .md files
HINTS = Path(__file__).with_name("execution_hints.json")


def _workers_never_trim() -> None:
    """In each worker process: caching a notebook trims no records (``run``)."""
    JupyterCacheBase.truncate_caches = lambda cache: None


def toc_names(toc_file: Path) -> list[str]:
    """Every document a jb-book _toc.yml names, in reading order (no suffix)."""
    toc = yaml.safe_load(toc_file.read_text())
    names = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                names.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return names


def toc_documents(root: Path, toc_file: Path) -> list[Path]:
    paths = [root / f"{name}.md" for name in toc_names(toc_file)]
    return [path for path in paths if path.exists()]


def is_notebook(path: Path) -> bool:
    """A MyST Markdown notebook: jupytext front matter with a kernelspec."""
    text = path.read_text()
    return text.startswith("---\n") and "kernelspec:" in text.split("\n---\n", 1)[0]


def expected_seconds(cache, notebooks: list[Path]) -> dict[str, float]:
    """uri -> seconds its execution is expected to take (0 if unknown)."""
    try:
        hints = json.loads(HINTS.read_text())
    except (OSError, ValueError):
        hints = {}
    seconds = {str(p): float(hints.get(p.stem, 0)) for p in notebooks}
    for record in cache.list_cache_records():  # oldest first: the last one wins
        took = (record.data or {}).get("execution_seconds")
        if record.uri in seconds and took:
            seconds[record.uri] = float(took)
    return seconds


def run(
    cache, notebooks: list[Path], timeout: int, processes: int, logger
) -> ExecutorRunResult:
    """Execute the notebooks that are not cached, longest first, in parallel."""
    uris = [str(p) for p in notebooks]
    todo = cache.list_unexecuted(filter_uris=uris)
    expected = expected_seconds(cache, notebooks)
    todo.sort(key=lambda r: -expected.get(r.uri, 0))
    if not todo:
        return ExecutorRunResult()
    logger.info(
        "executing %d notebook(s) in %d processes, longest first: %s",
        len(todo),
        min(processes, len(todo)),
        ", ".join(Path(r.uri).stem for r in todo),
    )
    NbProjectRecord.remove_tracebacks([r.pk for r in todo], cache.db)
    multiprocessing.log_to_stderr(REPORT_LEVEL)  # "Executing: <uri>" per notebook
    jobs = [ProcessData(r.pk, r.uri, cache, timeout, False) for r in todo]
    worker = ExecutionWorkerLocalMProc()
    # After caching a notebook, jupyter-cache trims old records with two queries
    # that are not one transaction: in two worker processes, one can delete the
    # record the other has just inserted (KeyError "Notebook file does not exist
    # for cache record PK", seen on a loaded machine). The workers never trim;
    # this process trims once, after them.
    workers = min(processes, len(todo))
    with multiprocessing.Pool(workers, initializer=_workers_never_trim) as pool:
        results = list(pool.imap_unordered(worker, jobs, chunksize=1))
    cache.truncate_caches()
    return ExecutorRunResult(
        succeeded=[uri for code, uri in results if code == 0],
        excepted=[uri for code, uri in results if code == 1],
        errored=[uri for code, uri in results if code == 2],
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--path-output",
        type=Path,
        default=ROOT,
        help="the folder jupyter-book builds into (its _build/)",
    )
    parser.add_argument("--toc", type=Path, default=ROOT / "_toc.yml")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)
    notebooks = [p for p in toc_documents(ROOT, args.toc) if is_notebook(p)]

    # One kernel per core: give each kernel one core's worth of threads, or the
    # kernels' thread pools fight over the cores and tiny ops slow down ~20x.
    cores = os.cpu_count() or 1
    threads = str(max(1, cores // max(1, min(len(notebooks), cores))))
    for var in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ.setdefault(var, threads)
    # tqdm bars belong in JupyterLab, not in the pages: the kernels inherit this
    # and attncourse.progress then prints nothing (forced, not a default).
    os.environ["ATTNCOURSE_PROGRESS"] = "0"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logger = logging.getLogger("execute_parallel")
    cache = get_cache(str(args.path_output / "_build" / ".jupyter_cache"))
    for path in notebooks:
        cache.add_nb_to_project(str(path), read_data=READER)
    start = time.perf_counter()
    result = run(cache, notebooks, args.timeout, cores, logger)
    seconds = time.perf_counter() - start
    print(
        f"executed {len(result.succeeded)} notebook(s) in {seconds:.1f} s; "
        f"{len(notebooks) - len(result.all())} already cached"
    )
    failed = result.excepted + result.errored
    for uri in failed:
        record = cache.get_project_record(uri)
        print(
            f"\n=== FAILED: {uri}\n{record.traceback or '(no traceback)'}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
