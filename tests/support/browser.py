"""Shared helpers for the end-to-end browser tests (test_browser_*.py).

The tests drive a real, headless Chromium -- Debian's ``/usr/bin/chromium``
(``apt-get install chromium``) -- through the PyPI ``playwright`` package; no
browser is downloaded. Each test gets fresh browser contexts (new profile
storage), every request and console message is recorded, and requests that
would leave the machine are recorded *and* aborted, so a test can never depend
on the network.

When a test fails, a full-page screenshot and the console/network log of each
of its pages are saved to ``_build/browser-artifacts/<test-name>/`` (override
the folder with ``BROWSER_ARTIFACTS``). Screenshots that tests take on purpose
go to ``_build/browser-artifacts/screenshots/``.

Without Chromium or playwright the tests skip locally, and fail when ``CI=true``.
Use ``CHROMIUM=/path/to/chrome`` to point at another Chromium build.

The root conftest loads this file as a plugin
(``pytest_plugins = ["support.browser"]``), which registers its fixtures
(``browser``, ``new_web``, ``web``, ``site_url``) and the hook that tells the
fixtures whether the test failed.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

from support.book import ROOT
from support.ci import on_ci, skip_or_fail, slowness

ARTIFACTS = Path(
    os.environ.get("BROWSER_ARTIFACTS") or ROOT / "_build" / "browser-artifacts"
)
SCREENSHOTS = ARTIFACTS / "screenshots"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-gpu",
    "--no-first-run",
    "--disable-quic",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
INSTALL_HINT = (
    "install them with: apt-get install -y chromium chromium-driver && "
    ".venv/bin/pip install playwright==1.65.2"
)


# --------------------------------------------------------------------------
# availability


def chromium_executable() -> str | None:
    """``$CHROMIUM`` if set (and only it), else Debian's /usr/bin/chromium or
    whatever ``chromium`` is on the PATH."""
    override = os.environ.get("CHROMIUM")
    candidates = (
        [override]
        if override
        else [
            "/usr/bin/chromium",
            shutil.which("chromium"),
            shutil.which("chromium-browser"),
        ]
    )
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package 'playwright' is not installed"
    if chromium_executable() is None:
        wanted = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
        return f"Chromium is not installed ({wanted} not found)"
    return None


def skip_without_browser() -> list:
    """Marks for a test module: skip (before the book is built) when the browser
    is missing locally. In CI nothing is skipped: the ``browser`` fixture fails."""
    reason = missing_browser()
    if reason is None or on_ci():
        return []
    return [pytest.mark.skip(reason=f"{reason} ({INSTALL_HINT})")]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (playwright's sync API allows only
    one running instance per thread, so the fixture is not session-wide)."""
    reason = missing_browser()
    if reason is not None:
        skip_or_fail(f"{reason} ({INSTALL_HINT})")
    from playwright.sync_api import sync_playwright

    executable = chromium_executable()
    manager = sync_playwright()
    playwright = manager.start()
    try:
        chromium = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
        )
    except Exception as exc:  # noqa: BLE001
        manager.__exit__(None, None, None)
        pytest.fail(f"playwright could not launch {executable}: {exc}", pytrace=False)
    yield chromium
    chromium.close()
    manager.__exit__(None, None, None)


# --------------------------------------------------------------------------
# recording what the pages do


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    if parsed.scheme in {"data", "blob", "about", "chrome-error", "devtools"}:
        return True
    return (parsed.hostname or "") in LOCAL_HOSTS


@dataclass
class Log:
    """Everything one browser context did, in order.

    Console errors and uncaught exceptions raised while a page loads (inside
    ``with log.loading():``) are kept apart from those raised later by what the
    test does, so one broken page script fails the page-load test, not every test.
    """

    console: list[str] = field(default_factory=list)  # "type: text (location)"
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)  # uncaught exceptions
    load_errors: list[str] = field(default_factory=list)  # both kinds, during loads
    requests: list[str] = field(default_factory=list)  # "METHOD url"
    external: list[str] = field(default_factory=list)  # urls leaving localhost
    failed: list[str] = field(default_factory=list)  # failed / HTTP >= 400
    is_loading: bool = False

    @contextlib.contextmanager
    def loading(self):
        self.is_loading = True
        try:
            yield
        finally:
            self.is_loading = False

    def error(self, kind: str, text: str) -> None:
        if self.is_loading:
            self.load_errors.append(f"{kind}: {text}")
        else:
            target = self.console_errors if kind == "console" else self.page_errors
            target.append(text)

    def problems(self, loads: bool = True) -> dict[str, list[str]]:
        """Failed loads, off-site requests, console errors and uncaught exceptions
        (with ``loads=False``, only those raised after pages finished loading)."""
        found = {
            "errors while the page loaded": self.load_errors if loads else [],
            "console errors": self.console_errors,
            "uncaught exceptions": self.page_errors,
            "failed requests": self.failed,
            "requests leaving localhost": self.external,
        }
        return {k: v for k, v in found.items() if v}

    def text(self) -> str:
        parts = []
        for name in (
            "console",
            "load_errors",
            "page_errors",
            "failed",
            "external",
            "requests",
        ):
            parts.append(f"== {name} ({len(getattr(self, name))})")
            parts += getattr(self, name)
        return "\n".join(parts) + "\n"


def record(context, log: Log) -> None:
    """Hook a context's events into ``log`` and abort requests leaving the machine."""

    def on_console(msg):
        loc = msg.location or {}
        where = f" ({loc.get('url', '')}:{loc.get('lineNumber', '')})" if loc else ""
        line = f"{msg.type}: {msg.text}{where}"
        log.console.append(line)
        if msg.type == "error":
            log.error("console", line)

    def on_web_error(error):
        where = error.page.url if error.page else ""
        log.console.append(f"uncaught: {error.error} ({where})")
        log.error("exception", f"{error.error} ({where})")

    def on_request(req):
        log.requests.append(f"{req.method} {req.url}")
        if not is_local(req.url):
            log.external.append(req.url)

    def on_failed(req):
        # Off-site requests are aborted on purpose; ERR_ABORTED is a request the
        # page itself cancelled (e.g. search snippets when the test navigates on).
        if is_local(req.url) and "ERR_ABORTED" not in (req.failure or ""):
            log.failed.append(f"{req.method} {req.url}: {req.failure}")

    def on_response(resp):
        if resp.status >= 400:
            log.failed.append(f"{resp.request.method} {resp.url}: HTTP {resp.status}")

    context.on("console", on_console)
    context.on("weberror", on_web_error)
    context.on("request", on_request)
    context.on("requestfailed", on_failed)
    context.on("response", on_response)
    context.route(lambda url: not is_local(url), lambda route: route.abort())


@dataclass
class Web:
    """A fresh browser context with one page, recording everything."""

    context: object
    page: object
    log: Log
    label: str

    def __repr__(self) -> str:
        return f"<Web {self.label} {self.page.url}>"


FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Mark the test as failed (setup or call) for the fixtures' teardown."""
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:120] or "test"


@pytest.fixture
def new_web(browser, request) -> Iterator[Callable[..., Web]]:
    """Factory: ``new_web(viewport=..., is_mobile=..., label=...)`` -> Web.

    Every context is closed at teardown; if the test failed, each page's
    screenshot and log go to ``ARTIFACTS/<test-name>/``.
    """
    made: list[Web] = []
    folder = ARTIFACTS / safe_name(request.node.name)
    shutil.rmtree(folder, ignore_errors=True)

    def make(viewport=None, is_mobile=False, label="desktop", **options) -> Web:
        log = Log()
        context = browser.new_context(
            viewport=viewport or DESKTOP,
            is_mobile=is_mobile,
            has_touch=is_mobile,
            device_scale_factor=1,
            color_scheme="light",
            reduced_motion="reduce",
            service_workers="block",
            **options,
        )
        # 30 s for each wait on an idle machine, longer on a loaded one.
        context.set_default_timeout(30_000 * slowness())
        record(context, log)
        web = Web(context, context.new_page(), log, label)
        made.append(web)
        return web

    yield make

    failed = request.node.stash.get(FAILED, False)
    for number, web in enumerate(made):
        if failed:
            save_artifacts(web, folder, f"{number}-{web.label}")
        try:
            web.context.close()
        except Exception:  # noqa: BLE001  (the browser may already be gone)
            pass


@pytest.fixture
def web(new_web) -> Web:
    """A fresh desktop-sized (1280 px) browser context and page."""
    return new_web()


def save_artifacts(web: Web, folder: Path, stem: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for page in web.context.pages:
        try:
            page.screenshot(
                path=str(folder / f"{stem}.png"), full_page=True, timeout=15_000
            )
        except Exception as exc:  # noqa: BLE001
            (folder / f"{stem}.screenshot-failed.txt").write_text(str(exc))
        url = page.url
        break
    else:
        url = "(no page)"
    (folder / f"{stem}.console.log").write_text(f"url: {url}\n{web.log.text()}")


# --------------------------------------------------------------------------
# pages


def wait_until_settled(page) -> None:
    """Wait for load, MathJax's first typesetting, web fonts and every image."""
    page.wait_for_load_state("load")
    page.wait_for_function(
        """() => !document.querySelector('script[src*="mathjax" i]')
                 || (window.MathJax && window.MathJax.startup
                     && window.MathJax.startup.promise)"""
    )
    page.evaluate(
        """async () => {
             if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
             await document.fonts.ready;
             await Promise.all([...document.images].map(img => img.complete ? null :
               new Promise(done => { img.addEventListener('load', done);
                                     img.addEventListener('error', done); })));
           }"""
    )


def load(web: Web, url: str | None = None):
    """Go to ``url`` (or reload) and wait until settled; errors raised meanwhile
    count as load errors. Returns the main response."""
    with web.log.loading():
        response = web.page.goto(url) if url else web.page.reload()
        wait_until_settled(web.page)
    return response


def assert_clean(web: Web, what: str, loads: bool = True) -> None:
    """No off-site or failed request, no console error, no uncaught exception
    (``loads=False``: ignore errors raised while pages loaded, see ``Log``)."""
    __tracebackhide__ = True
    problems = web.log.problems(loads)
    assert not problems, f"{what}:\n" + json.dumps(problems, indent=1)[:6000]


# --------------------------------------------------------------------------
# local servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".ipynb": "application/x-ipynb+json",
        ".woff": "font/woff",
        ".woff2": "font/woff2",
        ".js": "text/javascript",
    }

    def log_message(self, format, *args):  # noqa: A002
        pass


@pytest.fixture(scope="module")
def site_url(site) -> Iterator[str]:
    """The built book served over http on 127.0.0.1 at a free port."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def wait_for_http(
    url: str,
    timeout: float,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Poll ``url`` until it answers (any HTTP status) or ``timeout`` passes."""
    timeout *= slowness()  # a loaded machine starts servers more slowly
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"the server died before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError as exc:
            last = exc
            time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s: {last}")
