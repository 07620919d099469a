"""The course in JupyterLab, driven by a real browser.

A ``jupyter lab`` from this environment serves a *temporary copy* of the
course (book/, exercises/, solutions/, nbgrader_config.py) on 127.0.0.1, with
its own config, data, runtime, settings and workspace folders, so nothing is
written into the repository or the user's Jupyter folders (checked at
teardown). The server and its kernels are shut down at teardown. It gets the
flags ``make lab`` gives (read from ``make -n lab``): the course's JupyterLab
defaults in lab/overrides.json, e.g. a chapter opens as a notebook on
double-click.

The server gets the environment a student has when starting ``jupyter lab``
by hand in the course folder: the variables the Makefile exports (TensorFlow
quieting, ``MPLBACKEND=Agg``) are removed, so the chapter itself (``import
attncourse`` first) must keep TensorFlow quiet and figures must render inline.
"""

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.register_assert_rewrite("browser")  # before the import below

from support.book import ROOT, chapters, code_cells, source_path  # noqa: E402
from support.browser import (  # noqa: E402
    ARTIFACTS,
    SCREENSHOTS,
    free_port,
    skip_without_browser,
    wait_for_http,
)

pytestmark = [pytest.mark.browser, *skip_without_browser()]

RUN_TIMEOUT = float(os.environ.get("BROWSER_LAB_RUN_TIMEOUT", "240"))  # seconds
COPIED = ["book", "exercises", "solutions", "nbgrader_config.py"]
NOT_COPIED = shutil.ignore_patterns(
    ".ipynb_checkpoints", "__pycache__", "_build", "gradebook.db", "*.pyc"
)
# Makefile exports that a student's `jupyter lab` does not have.
DROPPED_ENV = [
    "MPLBACKEND",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "KERAS_BACKEND",
    "JUPYTER_CONFIG_DIR",
    "JUPYTER_DATA_DIR",
    "JUPYTERLAB_SETTINGS_DIR",
    "JUPYTERLAB_WORKSPACES_DIR",
]
# User settings for the test profile: no news prompt, every cell kept in the DOM.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none"
    },
}


def make_lab_flags() -> list[str]:
    """The flags ``make lab`` gives ``jupyter lab`` (the course's settings in
    lab/overrides.json), read from ``make -n lab`` so the server under test starts
    exactly as the learner's does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    try:
        dry = subprocess.run(
            ["make", "-s", "-n", "--no-print-directory", "lab"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError:
        pytest.fail("make not found: the README's commands need it")
    lines = [
        shlex.split(line)
        for line in dry.stdout.splitlines()
        if re.search(r"jupyter(-lab)? lab\b|jupyter-lab\b", line)
    ]
    assert dry.returncode == 0 and len(lines) == 1, (
        f"`make -n lab` should print one `jupyter lab` line:\n{dry.stdout}{dry.stderr}"
    )
    words = lines[0]
    return words[words.index("lab") + 1 :] if "lab" in words else words[1:]


def lab_chapters() -> list[str]:
    """Chapters to run in Lab: the first (addressing) by default, to stay within
    the time budget; BROWSER_LAB_CHAPTERS=all or a comma list for more."""
    wanted = os.environ.get("BROWSER_LAB_CHAPTERS", "").strip()
    every = chapters()
    if wanted == "all":
        return every
    if wanted:
        return [d for d in every if d in {w.strip() for w in wanted.split(",")}]
    return ["book/addressing"] if "book/addressing" in every else every[:1]


def released_notebooks() -> list[Path]:
    folder = ROOT / "exercises"
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
    )


JUPYTER_LITTER = re.compile(
    r"(^|/)(\.ipynb_checkpoints|gradebook\.db|\.virtual_documents)(/|$)"
)


def litter() -> set[str]:
    """Files a Jupyter server would leave in the repository (checkpoints, a
    gradebook, notebooks paired with chapters). Only these are compared: other
    developers may edit the course while the tests run."""
    paths = list(ROOT.glob("*"))
    for name in COPIED:
        if (ROOT / name).is_dir():
            paths += (ROOT / name).rglob("*")
    found = set()
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if JUPYTER_LITTER.search(rel) or (
            path.suffix == ".ipynb" and path.with_suffix(".md").exists()
        ):
            found.add(rel)
    return found


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    proc: subprocess.Popen
    log: Path

    def tree(self, path: str) -> str:
        """A URL opening ``path`` in a fresh workspace (nothing restored from the
        previous test's tabs)."""
        where = f"/tree/{path}" if path else ""
        workspace = f"test-{secrets.token_hex(4)}"
        return f"{self.url}/lab/workspaces/{workspace}{where}?token={self.token}"

    def server_log(self) -> str:
        return self.log.read_text(errors="replace")[-6000:] if self.log.exists() else ""


def own_processes(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (this test's temp folder)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode(errors="ignore"):
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def stop_lab(lab: Lab, marker: str) -> None:
    """Shut down through the API (kernels first), then by signal; then make sure
    no kernel of this server survives (their connection files are in ``marker``)."""
    if lab.proc.poll() is None:
        try:
            req = urllib.request.Request(
                f"{lab.url}/api/shutdown",
                method="POST",
                headers={"Authorization": f"token {lab.token}"},
            )
            urllib.request.urlopen(req, timeout=5).close()
            lab.proc.wait(timeout=20)
        except Exception:  # noqa: BLE001
            pass
    if lab.proc.poll() is None:
        os.killpg(lab.proc.pid, signal.SIGTERM)
        try:
            lab.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(lab.proc.pid, signal.SIGKILL)
            lab.proc.wait(timeout=10)
    for pid in own_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    jupyter_lab = Path(sys.executable).with_name("jupyter-lab")
    if not jupyter_lab.exists():
        pytest.fail(f"{jupyter_lab} not found: JupyterLab is in requirements.txt")
    base = tmp_path_factory.mktemp("lab")
    root = base / "course"
    root.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=NOT_COPIED)
        elif src.is_file():
            shutil.copy2(src, root / name)
    dirs = {
        k: base / k
        for k in ("config", "data", "runtime", "settings", "workspaces", "ipython")
    }
    for d in dirs.values():
        d.mkdir()
    for rel, value in SETTINGS.items():
        target = dirs["settings"] / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(value))
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(
        JUPYTER_CONFIG_DIR=str(dirs["config"]),  # no ~/.jupyter config
        JUPYTER_DATA_DIR=str(dirs["data"]),  # notebook signatures
        JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),  # connection files, cookie
        JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
        JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
        IPYTHONDIR=str(dirs["ipython"]),
        PYTHONDONTWRITEBYTECODE="1",  # no __pycache__ in the repo
    )
    flags = make_lab_flags()
    token = secrets.token_hex(16)
    port = free_port()
    log = base / "server.log"
    before = litter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                str(jupyter_lab),
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--ServerApp.shutdown_no_activity_timeout=900",
                "--MappingKernelManager.cull_idle_timeout=900",
                *flags,
            ],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Lab(f"http://127.0.0.1:{port}", token, root, proc, log)
    try:
        wait_for_http(
            f"{server.url}/api/status?token={token}",
            timeout=90,
            alive=lambda: proc.poll() is None,
        )
    except Exception as exc:  # noqa: BLE001
        stop_lab(server, str(base))
        pytest.fail(f"jupyter lab did not start: {exc}\n{server.server_log()}")
    yield server
    stop_lab(server, str(base))
    (ARTIFACTS / "lab-server.log").parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(log, ARTIFACTS / "lab-server.log")
    new = sorted(litter() - before)
    assert not new, f"the Lab tests left Jupyter files in the repository: {new[:10]}"


def close_sessions(lab: Lab) -> None:
    """Shut down every session (and its kernel) of this server, so the next
    notebook opened starts a fresh kernel, as it does for a learner."""
    auth = {"Authorization": f"token {lab.token}"}
    with urllib.request.urlopen(
        urllib.request.Request(f"{lab.url}/api/sessions", headers=auth), timeout=10
    ) as response:
        sessions = json.load(response)
    for session in sessions:
        req = urllib.request.Request(
            f"{lab.url}/api/sessions/{session['id']}", method="DELETE", headers=auth
        )
        urllib.request.urlopen(req, timeout=30).close()


def open_lab(new_web, lab: Lab, folder: str):
    web = new_web(viewport={"width": 1400, "height": 900}, label="lab")
    web.context.set_default_timeout(30_000)
    web.page.goto(lab.tree(folder))
    web.page.locator(".jp-DirListing-item").first.wait_for(timeout=90_000)
    return web


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu:visible .lm-Menu-item").filter(
        has=page.get_by_text(item, exact=True)
    ).first.click()


def visible_notebook(page):
    return page.locator(".jp-NotebookPanel:visible").first


def wait_for_kernel(page, timeout_ms: float) -> None:
    page.wait_for_function(
        """() => {
          const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
            .find(p => p.checkVisibility());
          if (!panel) return false;
          const name = panel.querySelector('.jp-Toolbar-kernelName')?.innerText || '';
          const status = panel.querySelector('.jp-Notebook-ExecutionIndicator')
            ?.dataset.status;
          return name && !/no kernel/i.test(name) && status === 'idle';
        }""",
        timeout=timeout_ms,
    )


@pytest.mark.parametrize("doc", lab_chapters())
def test_chapter_runs_in_jupyterlab(new_web, lab, doc):
    folder, name = doc.rsplit("/", 1) if "/" in doc else ("", doc)
    filename = source_path(doc).name
    assert filename.endswith(".md"), f"{doc} is not a MyST notebook"
    web = open_lab(new_web, lab, folder)
    page = web.page

    # README: right-click the chapter -> Open With -> Notebook (jupytext)
    page.locator(".jp-DirListing-item").filter(
        has=page.get_by_text(filename, exact=True)
    ).first.click(button="right")
    page.locator(".lm-Menu:visible .lm-Menu-item").filter(
        has=page.get_by_text("Open With", exact=True)
    ).hover()
    page.locator(".lm-Menu:visible").nth(1).locator(".lm-Menu-itemLabel").get_by_text(
        "Notebook", exact=True
    ).click()
    notebook = visible_notebook(page)
    notebook.wait_for()
    wait_for_kernel(page, 90_000)
    kernel = notebook.locator(".jp-Toolbar-kernelName").inner_text()
    expected_cells = len(code_cells(source_path(doc)))
    assert notebook.locator(".jp-CodeCell").count() == expected_cells, (
        f"Lab shows {notebook.locator('.jp-CodeCell').count()} code cells, "
        f"the source has {expected_cells}"
    )

    start = time.monotonic()
    menu(page, "Run", "Run All Cells")
    page.wait_for_function(
        """() => {
          const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
            .find(p => p.checkVisibility());
          const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
            .map(p => p.innerText.trim());
          const status = panel.querySelector('.jp-Notebook-ExecutionIndicator')
            ?.dataset.status;
          return prompts.length && prompts.every(p => /^\\[\\d+\\]:$/.test(p))
                 && status === 'idle';
        }""",
        timeout=RUN_TIMEOUT * 1000,
        polling=500,
    )
    seconds = time.monotonic() - start
    print(f"\n{doc}: ran in JupyterLab ({kernel}) in {seconds:.1f} s")
    figures = notebook.locator(".jp-RenderedImage img")
    if figures.count():
        figures.first.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"lab-{name}.png"))

    errors = notebook.locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
    ).all_inner_texts()
    stderr = notebook.locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    ).all_inner_texts()
    assert not errors, f"{doc}: error outputs in Lab:\n" + "\n---\n".join(errors)[:4000]
    tracebacks = [s for s in stderr if re.search(r"Traceback|Error\b|Exception\b", s)]
    assert not tracebacks, (
        f"{doc}: stderr with errors:\n" + "\n---\n".join(tracebacks)[:4000]
    )
    if stderr:
        warnings.warn(
            f"{doc} writes to stderr in JupyterLab: "
            + " | ".join(s.strip()[:200] for s in stderr[:5]),
            stacklevel=1,
        )

    outputs = notebook.locator(".jp-OutputArea-output")
    assert outputs.count() > 0, f"{doc}: no outputs after Run All"
    plots = [
        c
        for _, c in code_cells(source_path(doc))
        if re.search(r"plt\.show\(|show_heatmaps\(", c)
    ]
    if plots:
        widths = notebook.locator(".jp-RenderedImage img").evaluate_all(
            "imgs => imgs.map(i => i.naturalWidth)"
        )
        assert widths and all(w > 0 for w in widths), (
            f"{doc}: {len(plots)} cells draw figures, Lab shows {widths} (a "
            "non-inline matplotlib backend in the server's environment, e.g. "
            "MPLBACKEND=Agg from the Makefile or nbgrader_config.py, hides them)"
        )
    assert not web.log.page_errors, web.log.page_errors
    assert not web.log.external, f"Lab requested off-site URLs: {web.log.external[:10]}"


# What TensorFlow, oneDNN, CUDA or absl print when their logging is not quieted.
NOISY_OUTPUT = re.compile(
    r"warn|onednn|TF_ENABLE|tensorflow/|cuda|absl|[EWI]0000 |Traceback|Error\b",
    re.IGNORECASE,
)


def test_double_click_opens_chapter_as_notebook(new_web, lab):
    """The learner's first step (README): ``make lab``, then double-click a
    chapter in book/. It must open as a notebook (lab/overrides.json makes
    jupytext's viewer the default for Markdown), not as Markdown text, with a
    kernel, and the first cell's imports must print nothing noisy."""
    doc = "book/addressing"
    filename = source_path(doc).name
    close_sessions(lab)  # an earlier test's kernel would hide start-up output
    web = open_lab(new_web, lab, "book")
    page = web.page
    page.locator(".jp-DirListing-item").filter(
        has=page.get_by_text(filename, exact=True)
    ).first.dblclick()
    current = page.locator(
        "#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel"
    )
    current.filter(has_text=filename).wait_for(timeout=60_000)
    page.wait_for_selector(
        "#jp-main-dock-panel .jp-NotebookPanel:visible, "
        "#jp-main-dock-panel .jp-FileEditor:visible, "
        "#jp-main-dock-panel .jp-RenderedMarkdown:visible",
        timeout=60_000,
    )
    editors = page.locator("#jp-main-dock-panel .jp-FileEditor:visible").count()
    assert editors == 0, f"double-clicking {filename} opened a text editor"
    notebook = visible_notebook(page)
    assert notebook.count() == 1, f"double-clicking {filename} opened no notebook"
    wait_for_kernel(page, 90_000)
    expected_cells = len(code_cells(source_path(doc)))
    shown = notebook.locator(".jp-CodeCell").count()
    assert shown == expected_cells, (
        f"Lab shows {shown} code cells, the source has {expected_cells}"
    )
    assert notebook.locator(".jp-MarkdownCell").count() > 0

    first = notebook.locator(".jp-CodeCell").first
    first.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(
        """() => {
          const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
            .find(p => p.checkVisibility());
          const prompt = panel.querySelector('.jp-CodeCell .jp-InputPrompt');
          const status = panel.querySelector('.jp-Notebook-ExecutionIndicator')
            ?.dataset.status;
          return /^\\[1\\]:$/.test(prompt.innerText.trim()) && status === 'idle';
        }""",
        timeout=RUN_TIMEOUT * 1000,
        polling=250,
    )
    outputs = first.locator(".jp-OutputArea-output")
    texts = outputs.all_inner_texts()
    stderr = first.locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    ).all_inner_texts()
    noisy = [t for t in texts if NOISY_OUTPUT.search(t)]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "lab-double-click-addressing.png"))
    assert not stderr and not noisy, (
        f"the first cell of {filename} prints:\n" + "\n---\n".join(texts)[:3000]
    )
    wait_for_kernel(page, 30_000)
    assert not web.log.page_errors, web.log.page_errors
    assert not web.log.external, f"Lab requested off-site URLs: {web.log.external[:10]}"


def test_nbgrader_entries_in_jupyterlab(new_web, lab):
    web = open_lab(new_web, lab, "")
    page = web.page
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    items = page.locator(".lm-Menu:visible .lm-Menu-itemLabel").all_inner_texts()
    assert "Assignment List" in items and "Formgrader" in items, items
    page.keyboard.press("Escape")

    page.keyboard.press("Control+Shift+C")  # command palette
    page.locator(".lm-CommandPalette-input").fill("nbgrader")
    palette = page.locator(
        ".lm-CommandPalette-item:visible .lm-CommandPalette-itemLabel"
    )
    palette.first.wait_for()
    labels = palette.all_inner_texts()
    assert "Assignment List" in labels and "Formgrader" in labels, labels
    page.keyboard.press("Escape")

    menu(page, "Nbgrader", "Assignment List")
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for()
    panel.get_by_text("Released assignments").first.wait_for()

    menu(page, "Nbgrader", "Formgrader")
    frame = page.frame_locator("#formgrader iframe, iframe[src*='formgrader']").first
    frame.locator("body").wait_for()
    page.wait_for_function(
        """() => [...document.querySelectorAll('iframe')].some(f =>
             /formgrader/.test(f.src) && f.contentDocument
             && /manage_assignments/.test(f.contentWindow.location.href)
             && f.contentDocument.readyState === 'complete')""",
        timeout=30_000,
    )
    assert frame.get_by_text("Manage Assignments").first.is_visible()
    assert not web.log.page_errors, web.log.page_errors
    assert not web.log.external, f"Lab requested off-site URLs: {web.log.external[:10]}"


def test_validate_released_exercise(new_web, lab):
    released = released_notebooks()
    assert released, "exercises/ holds no released .ipynb (python -m grader release)"
    notebook_path = released[0].relative_to(ROOT).as_posix()
    web = new_web(viewport={"width": 1400, "height": 900}, label="lab")
    page = web.page
    page.goto(lab.tree(notebook_path))
    notebook = visible_notebook(page)
    notebook.wait_for(timeout=90_000)
    current = page.locator(
        "#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel"
    )
    assert current.inner_text() == released[0].name, "the exercise is not the open tab"
    wait_for_kernel(page, 90_000)
    button = notebook.locator(".validate-button")
    button.wait_for()
    button.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=RUN_TIMEOUT * 1000)
    title = dialog.locator(".jp-Dialog-header").inner_text().strip()
    body = dialog.locator(".jp-Dialog-body").inner_text().strip()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"lab-validate-{released[0].stem}.png"))
    # A released (unsolved) exercise validates: nbgrader runs it and reports
    # the failing cells -- its solution cells raise NotImplementedError, so
    # "Success!" would mean the visible tests did not run. It must not fail to
    # save, to check versions or to run the validate command itself.
    where = f"{notebook_path}: {title}: {body[:3000]}"
    assert title == "Validation Results", where
    assert "error running the validate command" not in body, where
    assert re.search(r"following cells? failed", body), where
    assert "Success!" not in body, where
    print(f"\n{notebook_path}: {title}: {' | '.join(body.splitlines()[:3])}")
    assert not web.log.page_errors, web.log.page_errors
