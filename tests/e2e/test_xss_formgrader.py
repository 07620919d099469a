"""A hostile submission, graded for real, is inert where people look at it.

One student of ``addressing`` submits a notebook that carries every way we know
to get script into a page: raw HTML in markdown cells (``<img onerror>``,
``<svg onload>``, ``<iframe srcdoc>``), a ``javascript:`` link, an SVG
attachment, and outputs of type text/html (``<script>``, ``<img onerror>``,
``<iframe srcdoc>``), application/javascript, image/svg+xml with a script,
text/markdown with raw HTML, and a widget view. It is graded through the real
command (``python -m grader grade``, sandboxed) on a temporary copy of the
course. Then, in a real Chromium, the instructor opens the submission in
nbgrader's formgrader (a ``jupyter server`` with the grader role's server
config from classroom/jupyter/grader), and the feedback HTML is opened as a
plain static page.

Each payload, if it ran, would set ``window.top.__xss`` and PUT a file
``xss-<vector>.txt`` through the Jupyter contents API with the instructor's
session (what a real attack does next: rewrite nbgrader_config.py). The test
asserts that no marker file appears and the global is never set, that the
student's work still shows as text, that the formgrader pages carry the
course's Content-Security-Policy, and that the formgrader still works under it
(its own scripts run, no CSP violation, scores load).
"""

import contextlib
import functools
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.register_assert_rewrite("browser")  # before the import below

from support.browser import (  # noqa: E402
    QuietHandler,
    free_port,
    skip_without_browser,
    wait_for_http,
)
from support.ci import skip_or_fail  # noqa: E402
from support.grading import (  # noqa: E402
    ROOT,
    copy_course,
    environment,
    student_solutions,
)
from support.run_grader import grade  # noqa: E402

from grader import notebooks as nbs  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.sandbox, *skip_without_browser()]

A = "addressing"
STUDENT = "mallory"
GRADE_TIMEOUT = 900  # seconds for the grading run (one kernel; slow under load)
ROLE_CONFIG = ROOT / "classroom" / "jupyter" / "grader"


def payload(name: str) -> str:
    """JavaScript (single quotes only) that records ``name`` and writes a file
    with the viewer's Jupyter session."""
    return (
        "(function(n){var w=window.top;(w.__xss=w.__xss||[]).push(n);"
        "var t=(document.cookie.match(/_xsrf=([^;]+)/)||[])[1]||'';"
        "fetch('/api/contents/xss-'+n+'.txt',{method:'PUT',credentials:'include',"
        "headers:{'Content-Type':'application/json','X-XSRFToken':t},"
        "body:JSON.stringify({type:'file',format:'text',content:n})})"
        "})('" + name + "')"
    )


SVG_DOC = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40" '
    'onload="{0}"><script>{1}</script><rect width="40" height="40"/></svg>'
)
LINK_TEXT = "open-my-notes"

# vector -> where it lives; every one must stay inert
MARKDOWN_VECTORS = {
    "md-img": f'Notes <img src="x" onerror="{payload("md-img")}"> end-md-img',
    "md-svg": f'<svg onload="{payload("md-svg")}"><circle r="5"/></svg> end-md-svg',
    "md-iframe": f'<iframe srcdoc="<script>{payload("md-iframe")}</script>">'
    f"</iframe> end-md-iframe",
    "md-link": f"[{LINK_TEXT}](javascript:void(top.__xss=['md-link']))",
    "md-data-link": "[data-link](data:text/html;base64,"
    "PHNjcmlwdD50b3AuX194c3M9WydkYXRhJ108L3NjcmlwdD4=)",
}
SVG_ATTACHMENT = SVG_DOC.format(
    payload("svg-attachment-onload"), payload("svg-attachment-script")
)
HTML_OUTPUTS = [
    f"<b>end-html-script</b><script>{payload('html-script')}</script>",
    f'<img src="x" onerror="{payload("html-img")}"> end-html-img',
    f'<iframe srcdoc="<script>{payload("html-iframe")}</script>"></iframe>',
]
WIDGET = {
    "application/vnd.jupyter.widget-view+json": {
        "model_id": "x",
        "version_major": 2,
        "version_minor": 0,
    },
    "text/html": f"<script>{payload('widget')}</script>",
    "text/plain": "widget-plain",
}
MARKDOWN_OUTPUT = f'<img src="x" onerror="{payload("markdown-output")}"> end-md-out'
OUTPUT_CODE = "\n".join(
    [
        "from IPython.display import HTML, SVG, Javascript, Markdown, display",
        *(f"display(HTML({h!r}))" for h in HTML_OUTPUTS),
        f"display(Javascript({payload('js')!r}))",
        f"display(SVG({SVG_DOC.format(payload('svg-onload'), payload('svg-script'))!r}))",  # noqa: E501
        f"display(Markdown({MARKDOWN_OUTPUT!r}))",
        f"display({WIDGET!r}, raw=True)",
        "print('end-stdout <script>not-markup</script>')",
    ]
)
VECTORS = sorted(
    [
        *MARKDOWN_VECTORS,
        "svg-attachment-onload",
        "svg-attachment-script",
        "html-script",
        "html-img",
        "html-iframe",
        "js",
        "svg-onload",
        "svg-script",
        "markdown-output",
        "widget",
        "report-note",
        "cell-tag",
    ]
)
# what must still be readable, as text, in the formgrader and the feedback
VISIBLE = [
    "end-md-img",
    "end-md-svg",
    "end-md-iframe",
    LINK_TEXT,
    "end-html-script",
    "end-html-img",
    "end-md-out",
    "end-stdout",
    "widget-plain",
]


def markdown_cell(source, **extra):
    return {
        "cell_type": "markdown",
        "metadata": {},
        "source": source,
        "id": secrets.token_hex(4),
        **extra,
    }


def hostile_notebook() -> dict:
    solutions = dict(student_solutions(A, "reference"))
    solutions["tf-solution"] += "\n" + OUTPUT_CODE
    nb = nbs.submission(nbs.read(ROOT / "exercises" / A / f"{A}.ipynb"), solutions)
    import base64

    extras = [markdown_cell(src) for src in MARKDOWN_VECTORS.values()]
    extras.append(
        markdown_cell(
            "![chart](attachment:chart.svg) end-attachment",
            attachments={
                "chart.svg": {
                    "image/svg+xml": base64.b64encode(SVG_ATTACHMENT.encode()).decode()
                }
            },
        )
    )
    # an unknown nbgrader id reaches the grading report's notes
    extras.append(
        markdown_cell(
            "report vector",
            metadata={
                "nbgrader": {
                    "grade_id": f'<img src=x onerror="{payload("report-note")}">',
                    "solution": False,
                    "grade": False,
                    "locked": False,
                }
            },
        )
    )
    extras.append(
        {
            "cell_type": "code",
            "source": "print('end-tag-cell')",
            "metadata": {"tags": ['x"><img src=x onerror="top.__xss=[1]">']},
            "outputs": [],
            "execution_count": None,
            "id": secrets.token_hex(4),
        }
    )
    at = next(i for i, c in enumerate(nb["cells"]) if nbs.grade_id(c) == "tf-solution")
    nb["cells"][at + 1 : at + 1] = extras
    return nb


def own_processes(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode(errors="ignore"):
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The graded course copy (one hostile student)."""
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")
    root = tmp_path_factory.mktemp("xss") / "course"
    copy_course(root, [A])
    nbs.write(hostile_notebook(), root / "submitted" / STUDENT / A / f"{A}.ipynb")
    run = grade(root, A, "--cell-timeout", "90", timeout=GRADE_TIMEOUT, log="grade.log")
    print(f"\ngrading the hostile submission: {run.seconds:.0f} s")
    assert run.code == 0, run.tail(6000)
    return root


@pytest.fixture(scope="module")
def formgrader(course, tmp_path_factory):
    """``jupyter server`` with the grader role's config, serving the course."""
    base = tmp_path_factory.mktemp("server")
    dirs = {k: base / k for k in ("config", "data", "runtime")}
    for d in dirs.values():
        d.mkdir()
    env = environment(course)
    for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        env.pop(k, None)
    env.update(
        JUPYTER_CONFIG_DIR=str(dirs["config"]),
        JUPYTER_CONFIG_PATH=str(ROLE_CONFIG),
        JUPYTER_DATA_DIR=str(dirs["data"]),
        JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    token, port = secrets.token_hex(16), free_port()
    log_path = base / "server.log"
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("jupyter-server")),
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={course}",
            ],
            cwd=course,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(
            f"{url}/api/status?token={token}",
            timeout=120,
            alive=lambda: proc.poll() is None,
        )
    except Exception as exc:  # noqa: BLE001
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(
            f"jupyter server did not start: {exc}\n{log_path.read_text()[-4000:]}"
        )
    yield {"url": url, "token": token, "log": log_path, "root": course}
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in own_processes(str(base)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextlib.contextmanager
def static_server(folder: Path):
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def submission_id(root: Path) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "attention-course") as gb:
        return gb.find_submission_notebook(A, A, STUDENT).id


def markers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("xss-*.txt"))


def executed(page) -> list:
    return page.evaluate("() => window.__xss || null") or []


def try_links(page) -> None:
    """Click what a curious grader would click: the student's link text."""
    for link in page.locator(
        f"a:has-text('{LINK_TEXT}'), a:has-text('data-link')"
    ).all():
        try:
            link.click(timeout=3000, no_wait_after=True)
        except Exception:  # noqa: BLE001  (not clickable: fine)
            pass
    page.wait_for_timeout(500)


class _Active(HTMLParser):
    """Elements that would run a payload: inline scripts, event handlers,
    script URLs, iframes, objects, embeds."""

    def __init__(self):
        super().__init__()
        self.found, self.script = [], False

    def handle_starttag(self, tag, attrs):
        self.script = tag == "script"
        if tag in ("iframe", "object", "embed", "frame"):
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = re.sub(r"\s", "", value or "").lower()
            if (
                name.startswith("on")
                and "__xss" in value
                or name in ("href", "src", "srcdoc", "data", "action")
                and (
                    value.startswith(("javascript:", "data:text", "vbscript:"))
                    or "__xss" in value
                )
            ):
                self.found.append(f"<{tag} {name}={value[:60]}>")

    def handle_endtag(self, tag):
        self.script = False

    def handle_data(self, data):
        if self.script and "__xss" in data:
            self.found.append(f"<script>{data[:60]}")


def active_payloads(page: str) -> list[str]:
    parser = _Active()
    parser.feed(page)
    return parser.found


def csp_violations(web) -> list[str]:
    return [
        line
        for line in web.log.console
        if re.search(r"Content Security Policy|Refused to", line)
    ]


def test_hostile_submission_is_inert_in_formgrader_and_feedback(
    course, formgrader, new_web
):
    url, token, root = formgrader["url"], formgrader["token"], formgrader["root"]
    sid = submission_id(root)
    web = new_web(label="formgrader")
    page = web.page

    # the instructor's session (a cookie for the whole server, as with Lab open)
    page.goto(f"{url}/api/status?token={token}")
    # the formgrader's own pages work under the policy
    page.goto(f"{url}/formgrader/manage_assignments")
    page.locator("td", has_text=A).first.wait_for(timeout=30_000)
    response = page.goto(f"{url}/formgrader/submissions/{sid}/")
    assert response.status == 200, response.status
    csp = response.headers.get("content-security-policy", "")
    assert re.search(r"script-src [^;]*'self'", csp), csp
    assert "'unsafe-inline'" not in re.search(r"script-src[^;]*", csp).group(0), csp
    assert "default-src 'none'" in csp and "object-src 'none'" in csp, csp
    page.wait_for_load_state("load")
    # formgrade.js ran and loaded the autograded scores into the score inputs
    page.wait_for_function(
        "() => { const s = document.getElementById('tf-visible');"
        " return s && s.getAttribute('placeholder') !== null; }",
        timeout=30_000,
    )
    assert page.evaluate("() => typeof submission_id") == "string"
    try_links(page)
    page.wait_for_timeout(1500)  # let any fetch land
    text = page.locator("body").inner_text()
    page_html = page.content()
    shown = {v: v in text for v in VISIBLE}

    # the lists of submissions and students (rendered by the formgrader's JS)
    for where in (f"gradebook/{A}/{A}", "manage_students"):
        page.goto(f"{url}/formgrader/{where}")
        page.locator("td", has_text=STUDENT).first.wait_for(timeout=30_000)
    formgrader_hits = executed(page)
    violations = csp_violations(web)

    # the feedback HTML, served as a plain static file (as a student's browser
    # or any web server shows it: no Jupyter sandbox around it)
    feedback = root / "feedback" / STUDENT / A / f"{A}.html"
    assert feedback.is_file(), sorted(p.name for p in feedback.parent.glob("*"))
    fweb = new_web(label="feedback")
    with static_server(feedback.parent) as where:
        fweb.page.goto(f"{where}/{feedback.name}")
        fweb.page.wait_for_load_state("load")
        try_links(fweb.page)
        fweb.page.wait_for_timeout(1000)
        feedback_hits = executed(fweb.page)
        feedback_text = fweb.page.locator("body").inner_text()
    feedback_html = feedback.read_text()

    assert not markers(root), f"payloads wrote files as the grader: {markers(root)}"
    assert not formgrader_hits, f"script ran in the formgrader: {formgrader_hits}"
    assert not feedback_hits, f"script ran in the feedback: {feedback_hits}"
    assert all(shown.values()), f"student work not shown as text: {shown}"
    missing = [v for v in VISIBLE if v not in feedback_text]
    assert not missing, f"not shown in the feedback: {missing}"
    assert not active_payloads(feedback_html), active_payloads(feedback_html)
    assert not active_payloads(page_html), active_payloads(page_html)
    assert not violations, (
        "the formgrader's own scripts were blocked by the policy:\n"
        + "\n".join(violations[:20])
    )

    # the grading report: the student's text is text, not markup
    md = (root / "grading-report.md").read_text()
    assert "report-note" in md or "&lt;img" in md, md[-3000:]
    assert "<img" not in md, md[-3000:]
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    assert "<img" not in markdown2html_mistune(md)
    raw_json = (root / "grading-report.json").read_text()
    assert "<" not in raw_json, "raw '<' in grading-report.json"
    notes = json.loads(raw_json)["rows"][0]["notes"]
    assert any("<img" in n for n in notes), notes  # the text itself survives
    print(f"\nvectors checked: {', '.join(VECTORS)}")


def test_sanitizer_keeps_honest_work_and_grader_outputs():
    """In process (no browser needed): what the preprocessor keeps and drops --
    also for what staging would have removed already (attachments, metadata)."""
    import base64

    import nbformat

    from grader.sanitize import markdown_problems, sanitize_notebook

    release = nbformat.read(str(ROOT / "exercises" / A / f"{A}.ipynb"), as_version=4)
    honest = (
        "# Notes\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\n$x<y$, `<b>`, "
        "[docs](https://example.org) ![plot](attachment:p.png)\n\n"
        "```python\nprint('<script>')\n```"
    )
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    svg = base64.b64encode(SVG_ATTACHMENT.encode()).decode()
    nb = nbformat.v4.new_notebook(
        metadata={**release.metadata, "widgets": {"x": 1}, "title": "<b>"}
    )
    nb.cells = [
        *release.cells,
        nbformat.v4.new_markdown_cell(
            honest,
            attachments={"p.png": {"image/png": png}, "s.svg": {"image/svg+xml": svg}},
        ),
        nbformat.v4.new_code_cell(
            "x",
            outputs=[
                nbformat.v4.new_output(
                    "error",
                    ename="GradingError",
                    evalue="<b>",
                    traceback=["GradingError: <b> wrong axis"],
                ),
                nbformat.v4.new_output("stream", name="stdout", text="<i>hi</i>"),
                nbformat.v4.new_output(
                    "display_data",
                    data={
                        "text/html": "<table><tr><td>1</td></tr></table>",
                        "text/plain": "   a\n0  1",
                        "image/png": png,
                    },
                    metadata={
                        "image/png": {"width": 3, "onload": "x"},
                        "text/html": {"isolated": True},
                    },
                ),
            ],
        ),
    ]
    before = [c.source for c in release.cells if c.cell_type == "markdown"]
    assert not any(markdown_problems(s) for s in before), "course text would change"
    changes = sanitize_notebook(nb)
    assert [c.source for c in nb.cells if c.cell_type == "markdown"][
        : len(before)
    ] == before, "the instructor's markdown was changed"
    cell = nb.cells[len(release.cells)]
    assert cell.source == honest and set(cell.attachments) == {"p.png"}, changes
    error, stream, display = nb.cells[-1].outputs
    assert error.evalue == "<b>" and error.traceback == ["GradingError: <b> wrong axis"]
    assert stream.text == "<i>hi</i>"
    assert set(display.data) == {"text/plain", "image/png"}
    assert display.data["text/plain"] == "   a\n0  1"
    assert display.metadata == {"image/png": {"width": 3}}
    assert set(nb.metadata) == {"kernelspec", "language_info"}
