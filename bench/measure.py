"""Small measuring helpers shared by the benchmarks in ``bench/``.

Nothing here knows about the book; each piece can be used on its own:

* ``TreeRSSSampler`` -- peak resident memory of a process *and all its
  descendants*, sampled in a background thread (psutil). ``run_measured`` runs a
  command under it and also times it.
* ``Timer`` -- wall-clock seconds of a ``with`` block.
* ``site_weights`` -- what each HTML page of a built static site costs to load:
  its HTML, the local images it shows, the CSS / JS / fonts it pulls in, MathJax
  counted apart.
* ``Target`` and ``targets_table`` -- a measured value against a limit, pass or
  MISS, as markdown; ``markdown_table`` is the plain table writer beneath it.
* ``machine_info`` -- cores, memory, load average, Python and package versions,
  and a timestamp, for a report.

``bench/`` is not a package: scripts and tests put this folder on ``sys.path``
and ``import measure``.
"""

from __future__ import annotations

import html.parser
import json
import os
import platform
import posixpath
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psutil

__all__ = [
    "GB",
    "MB",
    "Target",
    "Timer",
    "TreeRSSSampler",
    "fmt_bytes",
    "kill_tree",
    "machine_info",
    "markdown_table",
    "package_version",
    "page_weight",
    "run_measured",
    "site_weights",
    "targets_table",
]

MB = 1000**2  # limits are decimal: "2 MB" = 2 * MB bytes
GB = 1000**3


def fmt_bytes(n: float | None) -> str:
    """Decimal units, three significant figures: 1234567 -> '1.23 MB'."""
    if n is None:
        return "–"
    for unit, size in (("GB", GB), ("MB", MB), ("kB", 1000)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


# --- time ------


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds`` (perf_counter wall time).

    While the block runs, ``t.seconds`` is the time elapsed so far.
    """

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None

    def __enter__(self) -> Timer:
        self.start, self.end = time.perf_counter(), None
        return self

    def __exit__(self, *exc) -> None:
        self.end = time.perf_counter()

    @property
    def seconds(self) -> float:
        if self.start is None:
            return 0.0
        return (self.end or time.perf_counter()) - self.start


# --- memory of a process tree ------


def _vm_hwm_bytes(pid: int) -> int | None:
    """The kernel's RSS high-water mark of one process (Linux), else None."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) * 1024 if match else None


class TreeRSSSampler:
    """Peak of the summed RSS of a process and its descendants, polled in a thread.

    Every ``interval`` seconds (default 50 ms) it lists the process ``pid``
    (default: this process) and all its descendants with psutil and adds up
    their resident set sizes; ``peak_bytes`` is the largest sum seen. With
    ``include_root=False`` the root itself is left out, which measures "the
    children I started" (e.g. a Jupyter kernel and whatever it spawns).

        with TreeRSSSampler(proc.pid) as mem:
            proc.wait()
        mem.peak_bytes, mem.peak_processes, mem.samples

    Caveats, all conservative or documented in the results:

    * RSS counts shared pages (libraries, copy-on-write memory) once per
      process, so a tree of processes that load the same libraries reads
      higher than its real footprint.
    * A peak shorter than the interval can fall between two samples. As a
      cross-check, ``hwm_sum_bytes`` adds up each process's own high-water mark
      (``VmHWM`` on Linux, the largest value read while it was seen). That is an
      upper bound for the tree's simultaneous peak, not a measurement of it: the
      processes need not peak at the same time. A process can also reset its
      own mark (``/proc/self/clear_refs``), which lowers this figure.
    * A process that starts and ends between two samples is not seen at all.
    """

    def __init__(
        self,
        pid: int | None = None,
        *,
        include_root: bool = True,
        interval: float = 0.05,
    ) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.include_root = include_root
        self.interval = interval
        self.peak_bytes = 0
        self.peak_processes = 0  # processes counted in the peak sample
        self.peak_at = None  # seconds after start() of the peak sample
        self.max_processes = 0  # most processes seen in one sample
        self.samples = 0
        self._hwm: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    @property
    def hwm_sum_bytes(self) -> int | None:
        """Sum of every seen process's VmHWM (see the class docstring)."""
        return sum(self._hwm.values()) if self._hwm else None

    def _processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            procs = root.children(recursive=True)
        except psutil.Error:
            return []
        return [root, *procs] if self.include_root else procs

    def sample(self) -> int:
        """Take one sample now; returns the tree's current summed RSS."""
        total = count = 0
        for proc in self._processes():
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # exited (or not ours) since the listing
                continue
            count += 1
            hwm = _vm_hwm_bytes(proc.pid)
            if hwm is not None:
                self._hwm[proc.pid] = max(hwm, self._hwm.get(proc.pid, 0))
        self.samples += 1
        self.max_processes = max(self.max_processes, count)
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_processes = total, count
            self.peak_at = time.perf_counter() - self._t0
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> TreeRSSSampler:
        self._t0 = time.perf_counter()
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name="tree-rss-sampler"
        )
        self._thread.start()
        return self

    def stop(self) -> TreeRSSSampler:
        if self._thread is not None:
            self.sample()  # one last look before the caller moves on
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self

    def __enter__(self) -> TreeRSSSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def result(self) -> dict:
        """The figures as a JSON-ready dict."""
        return {
            "peak_rss_bytes": self.peak_bytes,
            "peak_processes": self.peak_processes,
            "peak_at_seconds": (
                None if self.peak_at is None else round(self.peak_at, 2)
            ),
            "max_processes": self.max_processes,
            "hwm_sum_bytes": self.hwm_sum_bytes,
            "samples": self.samples,
            "interval_seconds": self.interval,
        }


def kill_tree(pid: int) -> None:
    """Kill a process this program started, and its descendants, by pid."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


def run_measured(
    cmd: list[str],
    *,
    interval: float = 0.05,
    timeout: float | None = None,
    **popen_kwargs,
) -> dict:
    """Run ``cmd`` to completion; wall seconds and the peak RSS of its tree.

    stdout and stderr are captured as text unless ``popen_kwargs`` says
    otherwise. Returns ``{"cmd", "returncode", "seconds", "stdout", "stderr"}``
    plus ``TreeRSSSampler.result()``. On timeout the started process and its
    descendants are killed (by pid) and ``subprocess.TimeoutExpired`` re-raised.
    """
    popen_kwargs.setdefault("stdout", subprocess.PIPE)
    popen_kwargs.setdefault("stderr", subprocess.PIPE)
    popen_kwargs.setdefault("text", True)
    with Timer() as timer:
        proc = subprocess.Popen(cmd, **popen_kwargs)
        with TreeRSSSampler(proc.pid, interval=interval) as mem:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.communicate()
                raise
    return {
        "cmd": [str(c) for c in cmd],
        "returncode": proc.returncode,
        "seconds": round(timer.seconds, 2),
        "stdout": stdout,
        "stderr": stderr,
        **mem.result(),
    }


# --- weight of the pages of a static site ------

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".avif", ".ico"}
FONT_SUFFIXES = {".woff2", ".woff", ".ttf", ".otf", ".eot"}
_FONT_FACE = re.compile(r"@font-face\s*{([^}]*)}", re.I | re.S)
_SRC = re.compile(r"(?<![-\w])src\s*:\s*([^;}]*)", re.I)
_URL = re.compile(r"""url\(\s*(['"]?)([^'")]+)\1\s*\)""", re.I)
_IMPORT = re.compile(r"""@import\s+(?:url\(\s*)?(['"]?)([^'")\s;]+)\1""", re.I)
_CSS_COMMENT = re.compile(r"/\*.*?\*/", re.S)


class _PageParser(html.parser.HTMLParser):
    """Collects the sub-resources a page asks for: images, scripts, styles,
    preloads. Inline ``data:`` URLs are part of the HTML bytes already."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.images: list[str] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.preloads: list[tuple[str, str]] = []  # (href, as)

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        rel = a.get("rel", "").lower().split()
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        elif tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        elif tag == "link" and a.get("href"):
            if "stylesheet" in rel:
                self.styles.append(a["href"])
            elif "preload" in rel:
                self.preloads.append((a["href"], a.get("as", "").lower()))


def _is_external(url: str) -> bool:
    """A URL that leaves the site (``data:`` URLs are inline, not external)."""
    parts = urlsplit(url)
    return parts.scheme.lower() != "data" and bool(parts.scheme or parts.netloc)


def _local_target(url: str, base: Path, root: Path) -> Path | None:
    """The file a relative or site-absolute URL names (query and fragment
    dropped), or None for ``data:``/external URLs and empty paths."""
    if url.startswith("data:") or _is_external(url):
        return None
    path = unquote(urlsplit(url).path)
    if not path:
        return None
    joined = root / path.lstrip("/") if path.startswith("/") else base / path
    return Path(posixpath.normpath(joined.as_posix()))


def _css_references(css: Path, root: Path, seen: set[Path]) -> tuple[set, set]:
    """(stylesheets, fonts) a stylesheet loads: itself, its @imports (recursively)
    and the first ``url()`` of each @font-face ``src`` -- the format a current
    browser picks from the usual woff2-first lists."""
    styles, fonts = {css}, set()
    if css in seen or not css.is_file():
        return styles, fonts
    seen.add(css)
    text = _CSS_COMMENT.sub("", css.read_text(encoding="utf-8", errors="ignore"))
    for match in _IMPORT.finditer(text):
        target = _local_target(match.group(2), css.parent, root)
        if target is not None:
            more_styles, more_fonts = _css_references(target, root, seen)
            styles |= more_styles
            fonts |= more_fonts
    for face in _FONT_FACE.finditer(text):
        src = _SRC.search(face.group(1))
        url = _URL.search(src.group(1)) if src else None
        if url:
            target = _local_target(url.group(2), css.parent, root)
            if target is not None:
                fonts.add(target)
    return styles, fonts


def page_weight(
    page: Path,
    root: Path,
    *,
    mathjax_marker: str = "mathjax",
    _css_cache: dict | None = None,
) -> dict:
    """What one HTML page costs to load, in bytes, from the files on disk.

    ``root`` is the site's top folder (for ``/``-absolute URLs). Each file
    counts once per page. Groups:

    * ``html`` -- the page itself (inline SVG and ``data:`` images included);
    * ``images`` -- local ``<img src>`` files, notebook outputs included;
    * ``css`` -- ``<link rel=stylesheet>`` files and their ``@import``s;
    * ``js`` -- ``<script src>`` and ``<link rel=preload as=script>`` files,
      except MathJax;
    * ``fonts`` -- preloaded fonts plus the first ``src`` of every
      ``@font-face`` in the page's CSS. An upper bound: a browser fetches a
      face only if the page's text uses it;
    * ``mathjax`` -- scripts whose path contains ``mathjax_marker`` (the entry
      script). What MathJax then loads itself (its fonts, TeX extensions)
      depends on the formulas and is not resolved here; see
      ``site_weights()["mathjax"]`` for the size of what it could load.

    ``page_with_images`` = html + images; ``total`` = every group.
    ``missing`` lists local files that do not exist, ``external`` URLs that
    leave the site, ``files`` the counted files of each group (site-relative).
    """
    root, page = root.resolve(), page.resolve()
    css_cache = {} if _css_cache is None else _css_cache
    parser = _PageParser()
    parser.feed(page.read_text(encoding="utf-8", errors="ignore"))
    groups: dict[str, set[Path]] = {
        k: set() for k in ("images", "css", "js", "fonts", "mathjax")
    }
    external, missing = [], []

    def add(url: str, group: str) -> None:
        if _is_external(url):
            external.append(url)
            return
        target = _local_target(url, page.parent, root)
        if target is None:
            return
        if group == "js" and mathjax_marker in target.as_posix().lower():
            group = "mathjax"
        if group == "css":
            if target not in css_cache:
                css_cache[target] = _css_references(target, root, set())
            styles, fonts = css_cache[target]
            groups["css"] |= styles
            groups["fonts"] |= fonts
            return
        groups[group].add(target)

    for url in parser.images:
        add(url, "images")
    for url in parser.scripts:
        add(url, "js")
    for url in parser.styles:
        add(url, "css")
    for url, kind in parser.preloads:
        suffix = Path(urlsplit(url).path).suffix.lower()
        if kind == "font" or suffix in FONT_SUFFIXES:
            add(url, "fonts")
        elif kind == "style" or suffix == ".css":
            add(url, "css")
        elif kind == "image" or suffix in IMAGE_SUFFIXES:
            add(url, "images")
        else:
            add(url, "js")

    def rel(path: Path) -> str:
        return (
            path.relative_to(root).as_posix()
            if path.is_relative_to(root)
            else str(path)
        )

    sizes = {"html": page.stat().st_size}
    for group, files in groups.items():
        sizes[group] = 0
        for path in files:
            if path.is_file():
                sizes[group] += path.stat().st_size
            else:
                missing.append(rel(path))
    return {
        "page": page.relative_to(root).as_posix(),
        **{f"{k}_bytes": v for k, v in sizes.items()},
        "n_images": len(groups["images"]),
        "page_with_images_bytes": sizes["html"] + sizes["images"],
        "total_bytes": sum(sizes.values()),
        "loads_mathjax": bool(groups["mathjax"]),
        "missing": sorted(set(missing)),
        "external": sorted(set(external)),
        "files": {
            group: sorted(rel(p) for p in files) for group, files in groups.items()
        },
    }


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def site_weights(
    root: Path,
    *,
    mathjax_dir: str = "_static/mathjax",
    exclude: tuple[str, ...] = ("_sources/", "_static/"),
) -> dict:
    """``page_weight`` of every ``*.html`` under ``root`` (pages below
    ``exclude`` folders skipped, also inside an edition's folder: ``zh/_static/``),
    largest ``page_with_images`` first, plus site totals and what MathJax could
    load lazily: every file under ``mathjax_dir`` except the entry scripts the
    pages load (an upper bound; a page with a few formulas loads a handful of
    its fonts). ``assets`` lists every file pages load besides their HTML,
    largest first, with its group and how many pages load it."""
    root = Path(root).resolve()
    css_cache: dict = {}
    pages = []
    for page in sorted(root.rglob("*.html")):
        rel = page.relative_to(root).as_posix()
        if any(rel.startswith(p) or f"/{p}" in rel for p in exclude):
            continue
        pages.append(page_weight(page, root, _css_cache=css_cache))
    pages.sort(key=lambda p: p["page_with_images_bytes"], reverse=True)
    assets: dict[str, dict] = {}
    for page in pages:
        for group, files in page["files"].items():
            for rel in files:
                path = root / rel
                entry = assets.setdefault(
                    rel,
                    {
                        "file": rel,
                        "group": group,
                        "pages": 0,
                        "bytes": path.stat().st_size if path.is_file() else None,
                    },
                )
                entry["pages"] += 1
    assets_list = sorted(assets.values(), key=lambda a: a["bytes"] or 0, reverse=True)
    mj = root / mathjax_dir
    mathjax = None
    if mj.is_dir():
        entry = max((p["mathjax_bytes"] for p in pages), default=0)
        fonts = [p for p in mj.rglob("*") if p.suffix.lower() in FONT_SUFFIXES]
        folder = _tree_bytes(mj)
        mathjax = {
            "folder_bytes": folder,
            "entry_bytes": entry,
            "lazy_upper_bytes": folder - entry,
            "font_files": len(fonts),
            "font_bytes": sum(p.stat().st_size for p in fonts),
        }
    return {
        "root": str(root),
        "pages": pages,
        "site_bytes": _tree_bytes(root),
        "assets": assets_list,
        "mathjax": mathjax,
    }


# --- targets and tables ------


def markdown_table(
    header: list[str], rows: list[list], *, align: str | None = None
) -> str:
    """A GitHub-flavoured markdown table. Cells are str()-ed, ``|`` escaped,
    None shown as empty. ``align``: one letter per column (l, r or c)."""

    def cell(value) -> str:
        return (
            "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")
        )

    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    rule = [marks[a] for a in align] if align else ["---"] * len(header)
    lines = [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "| " + " | ".join(rule) + " |",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


@dataclass
class Target:
    """A measured ``value`` against a ``limit``.

    ``kind`` "max": pass if value <= limit; "min": pass if value >= limit.
    ``status`` is "pass" or "MISS"; "info" for a figure shown without a limit;
    "n/a" when the value was not measured. ``fmt`` formats value and limit for
    the table (a format spec such as ".1f", or a callable).
    """

    name: str
    value: float | None
    limit: float | None
    unit: str = ""
    kind: str = "max"
    note: str = ""
    fmt: object = ".2f"
    extra: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.value is None:
            return "n/a"
        if self.limit is None:
            return "info"
        ok = (
            self.value <= self.limit if self.kind == "max" else self.value >= self.limit
        )
        return "pass" if ok else "MISS"

    def show(self, value) -> str:
        if value is None:
            return "–"
        text = self.fmt(value) if callable(self.fmt) else format(value, self.fmt)
        return f"{text} {self.unit}".rstrip()

    def row(self) -> list[str]:
        sign = "≤" if self.kind == "max" else "≥"
        limit = "–" if self.limit is None else f"{sign} {self.show(self.limit)}"
        return [self.name, self.show(self.value), limit, self.status, self.note]

    def as_dict(self) -> dict:
        out = asdict(self)
        out.pop("fmt")
        out["status"] = self.status
        return out


def targets_table(targets: list[Target]) -> str:
    """Markdown: target | measured | limit | result | note."""
    return markdown_table(
        ["target", "measured", "limit", "result", "note"],
        [t.row() for t in targets],
        align="lrrcl",
    )


# --- the machine ------


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info(packages: tuple[str, ...] = ()) -> dict:
    """Timestamp (UTC), platform, Python, cores, memory, load average and the
    installed versions of ``packages`` (distribution names; None if absent)."""
    info = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "memory_available_bytes": psutil.virtual_memory().available,
        "load_average_1_5_15min": [round(x, 2) for x in os.getloadavg()],
        "versions": {name: package_version(name) for name in packages},
    }
    if hasattr(os, "sched_getaffinity"):
        info["usable_cores"] = len(os.sched_getaffinity(0))
    return info


def write_report(out: Path, report: dict, table: str) -> None:
    """Save ``report`` as JSON at ``out`` and ``table`` beside it (``.md``), print
    the table and where both went."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(table)
    print("\n" + table)
    print(f"wrote {out} and {out.with_suffix('.md')} in {report['seconds']} s")
