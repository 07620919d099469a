"""Results are judged from the message stream the grader saw, and honest
students are never accused.

Through the real grading command (``python -m grader grade``, sandboxed),
course S holds hostile submissions that replace, forge or inflate what a
hidden test recorded -- each one passed (or hurt the grader) before the
message-stream rules of ``grader.verdicts`` / ``grader.guard``:

* ``forged-after-clear``: the reported attack -- a ``post_run_cell`` hook
  clears a hidden test's outputs and publishes correct results and a clean
  integrity report of its own (6/8 points with unimplemented functions);
* ``hooks-patch-and-restore``: a ``pre_run_cell`` hook patches
  ``numpy.allclose`` and a ``post_execute`` hook restores it before the probe
  looks (the visible test passed);
* ``forged-idle``: during the hidden test the function publishes correct
  results and a report, then a forged ``idle`` so the grader stops reading
  the cell before the real ones come;
* ``update-into-test``: a later cell rewrites a hidden test's output in place
  with a display update;
* ``huge-display-update``: ``display(..., display_id=True).update(...)``
  with 30 MB (never passed the output cap);
* ``npz-bomb``: a recorded result (a dict, not a string) whose ``.npz``
  declares a 2 GB array (the grader inflated it);
* ``value-during-test``, ``value-from-a-thread``: ``sys.displayhook('ok')``
  during a test (nbgrader scores a test cell by its first error *or* value:
  8/8 with unimplemented functions, found by the hostile review);
* ``visible-helpers-neutered``: ``attncourse.testing.np`` swapped so that
  ``expect_close`` always passes (no flag before);
* ``honest-clear-output``: a correct function that calls ``clear_output`` is
  not accused (it was flagged ``tampered`` and scored 0);
* ``sandbox-view``: what a solution can import and read in the sandbox:
  no grader-side modules, no solutions or grading state, inputs only.

Course H runs the honest catalogue with two CPU hogs beside the grader and
asserts that nobody is accused. The unit tests at the end check the stream
rules and the decode limits one by one.
"""

import base64
import io
import json
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np
import pytest
from support.ci import skip_or_fail
from support.grading import ROOT, copy_course, student_solutions
from support.run_grader import grade

from grader import notebooks as nbs

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

A = "addressing"
TIMEOUT = 1500  # seconds for one course's grading run (a loaded machine)
RELEASE = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
REF = student_solutions(A, "reference")
TF_OK, TORCH_OK = REF["tf-solution"], REF["torch-solution"]


def _release_source(gid):
    cell = next(c for c in RELEASE["cells"] if nbs.grade_id(c) == gid)
    return nbs.source(cell)


TF_TODO, TORCH_TODO = _release_source("tf-solution"), _release_source("torch-solution")
assert "NotImplementedError" in TF_TODO and "NotImplementedError" in TORCH_TODO

# correct results for the grading inputs, computed the way the hidden test
# does, with a correct implementation kept out of the notebook's names
FORGER = f"""
import json as _json
import os as _os

from grader.kernel import recorder as _rec
from grader.kernel.inputs import load_file as _load_inputs
from grader.kernel.observations import INTEGRITY as _INT
from grader.kernel.observations import OBSERVATION as _OBS
from grader.kernel.observations import observation_payload as _payload

_right = {{}}
exec("import numpy as np\\nimport tensorflow as tf\\nimport torch\\n"
     + {TF_OK!r} + "\\n" + {TORCH_OK!r}, _right)


def _forged(fw):
    data = _load_inputs(_os.environ["GRADER_INPUTS"])
    observed = _rec.observe("addressing", "soft_lookup", fw, _right, data)
    return _json.dumps(_payload("addressing", "soft_lookup", fw, observed))
"""

FORGED_AFTER_CLEAR = (
    TF_TODO
    + "\n"
    + FORGER
    + """
from IPython.display import clear_output as _clear


def _after(result):
    for fw in ("tf", "torch"):
        if f'check("addressing", "soft_lookup", "{fw}")' in result.info.raw_cell:
            _clear()
            publish = get_ipython().display_pub.publish
            publish(data={_OBS: _forged(fw)}, metadata={})
            publish(data={_INT: _json.dumps({"v": 1, "cell": 0, "changed": []})},
                    metadata={})


get_ipython().events.register("post_run_cell", _after)
"""
)

UNIFORM_TORCH = """
def soft_lookup_torch(queries, keys, values, beta):
    n = keys.shape[1]
    weights = torch.full((queries.shape[0], queries.shape[1], n), 1.0 / n)
    return weights @ values, weights
"""

PATCH_AND_RESTORE = (
    UNIFORM_TORCH
    + """
import numpy as _np

_real_allclose = _np.allclose


def _patch(*args):
    _np.allclose = lambda *a, **k: True


def _restore(*args):
    _np.allclose = _real_allclose


get_ipython().events.register("pre_run_cell", _patch)
get_ipython().events.register("post_execute", _restore)
"""
)

FORGED_IDLE = (
    FORGER
    + """

def _probe_count():
    for f in get_ipython().events.callbacks["post_run_cell"]:
        if getattr(f, "__name__", "") == "report" and f.__closure__:
            names = f.__code__.co_freevars
            return f.__closure__[names.index("counter")].cell_contents["n"]
    return 0


def soft_lookup_torch(queries, keys, values, beta):
    if torch.is_tensor(beta) and beta.requires_grad:  # the hidden test
        ip = get_ipython()
        ip.display_pub.publish(data={_OBS: _forged("torch")}, metadata={})
        report = {"v": 1, "cell": _probe_count() + 1, "changed": []}
        ip.display_pub.publish(data={_INT: _json.dumps(report)}, metadata={})
        k = ip.kernel
        k.session.send(k.iopub_socket, "status", {"execution_state": "idle"},
                       parent=k.get_parent("shell"), ident=k._topic("status"))
        import time as _time
        _time.sleep(0.5)
    raise NotImplementedError()
"""
)

# the TensorFlow function leaves a display in its hidden test; the PyTorch
# solution cell (later) rewrites it in place
UPDATE_INTO_TEST_TF = TF_OK.replace(
    '."""\n',
    '."""\n    if isinstance(beta, tf.Variable):\n'
    "        from IPython.display import display\n"
    '        display({"text/plain": "working"}, raw=True, display_id="z")\n',
    1,
)
UPDATE_INTO_TEST_TORCH = (
    TORCH_OK
    + """
from IPython.display import update_display

update_display({"text/plain": "all hidden tests passed"}, raw=True, display_id="z")
"""
)
assert UPDATE_INTO_TEST_TF != TF_OK

HUGE_UPDATE = (
    TORCH_OK
    + """
from IPython.display import display

handle = display("a small output", display_id=True)
handle.update("x" * 30_000_000)
"""
)


def npz_bomb(size=2 * 1024**3) -> str:
    """A base64 .npz whose one array declares ``size`` bytes of zeros
    (deflated: about 2 MB)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (size // 4,)}
    )
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("outputs.npy", "w", force_zip64=True) as f,
    ):
        f.write(header.getvalue())
        block = bytes(64 * 1024**2)
        for _ in range(size // len(block)):
            f.write(block)
    return base64.b64encode(buf.getvalue()).decode()


def bomb_torch(ctx):
    return (
        TORCH_OK.replace('."""\n', '."""\n    _bomb(beta)\n', 1)
        + f"""

_BOMB = {ctx["bomb"]!r}


def _bomb(beta):
    if torch.is_tensor(beta) and beta.requires_grad:  # the hidden test
        from grader.kernel.observations import OBSERVATION
        fake = {{"v": 1, "assignment": "addressing", "check": "soft_lookup",
                 "framework": "torch", "error": None,
                 "cases": [{{"case": "main", "arrays": _BOMB, "missing": []}}]}}
        get_ipython().display_pub.publish(data={{OBSERVATION: fake}}, metadata={{}})
"""
    )


def sandbox_view(ctx):
    root = ctx["root"]
    paths = [
        f"{root}/solutions/{A}/hidden/reference.npz",
        f"{root}/solutions/{A}/{A}.ipynb",
        f"{root}/.grading/secret",
        f"{root}/.grading",
        f"{root}/grader/assignments/{A}.py",
        f"{root}/grader/judging.py",
        "solutions",
        ".grading",
    ]
    return (
        TF_OK
        + f"""
import importlib
import json
import os

for name in ("grader.assignments", "grader.numeric", "grader.judging",
             "grader.assignments.addressing", "grader.verdicts", "grader.fresh"):
    try:
        importlib.import_module(name)
        print("IMPORTED", name)
    except ImportError as e:
        print("NO-IMPORT", name, type(e).__name__)
for path in {paths!r}:
    try:
        if os.path.isdir(path):
            print("LISTED", path, os.listdir(path))
        else:
            open(path, "rb").read(1)
            print("READ", path)
    except OSError as e:
        print("BLOCKED", path, type(e).__name__)
with np.load(os.environ["GRADER_INPUTS"]) as f:
    print("INPUT-KEYS", json.dumps(sorted(f.files)))
"""
    )


@dataclass
class Case:
    student: str
    tf: float
    torch: float
    flags: set
    files: object  # (ctx) -> notebook
    notes: tuple = ()
    also: frozenset = frozenset()


def notebook(tf=None, torch=None):
    solutions = dict(REF)
    if tf is not None:
        solutions["tf-solution"] = tf
    if torch is not None:
        solutions["torch-solution"] = torch
    return nbs.submission(RELEASE, solutions)


def fixed(nb):
    return lambda ctx: nb


def _sleeps(seconds, count):
    def edit(ctx):
        nb = notebook()
        at = next(i for i, c in enumerate(nb["cells"]) if nbs.grade_id(c) == "setup")
        for _ in range(count):
            nb["cells"].insert(
                at + 1, nbformat.v4.new_code_cell(f"import time\ntime.sleep({seconds})")
            )
        return nb

    return edit


def _warning(code, kind):
    warn = f'    warnings.warn("slow path", {kind})\n'
    return "import warnings\n" + code.replace(
        "    diff = queries", warn + "    diff = queries", 1
    )


# found by the hostile review: a value shown during a test (nbgrader scores a
# test cell by its first error *or* execute_result), also from a thread ...
VALUE = {
    fw: f"def soft_lookup_{fw}(queries, keys, values, beta):\n"
    f"    import sys\n    sys.displayhook('ok')\n    raise NotImplementedError()\n"
    for fw in ("tf", "torch")
}
VALUE_THREAD = (
    "import sys, threading, time\n"
    "def _spam():\n"
    "    for _ in range(4000):\n"
    "        sys.displayhook('ok')\n"
    "        time.sleep(0.01)\n"
    "threading.Thread(target=_spam, daemon=True).start()\n" + TF_TODO
)
# ... the visible-test helpers' NumPy swapped (expect_close always passes) ...
NEUTERED = (
    "import attncourse.testing as _T\n"
    "class _NP:\n"
    "    def __getattr__(self, k):\n"
    "        return getattr(np, k)\n"
    "    def allclose(self, *a, **k):\n"
    "        return True\n"
    "_T.np = _NP()\n"
    "def soft_lookup_tf(queries, keys, values, beta):\n"
    "    n = keys.shape[1]\n"
    "    weights = tf.ones(tf.concat([tf.shape(queries)[:2], [n]], 0)) / n\n"
    "    return tf.matmul(weights, values), weights\n"
)
# ... and an honest function that clears its own output (must not be accused)
CLEARS = TF_OK.replace(
    '(TensorFlow)."""\n',
    '(TensorFlow)."""\n    from IPython.display import clear_output\n'
    "    clear_output(wait=True)\n    print('running')\n",
    1,
)
assert CLEARS != TF_OK

# a child process escapes the memory cases' cap (kernel process only)
CHILD_DURING_TEST = (
    TORCH_OK
    + """
import subprocess as _sp
import sys as _sys

_honest = soft_lookup_torch


def soft_lookup_torch(queries, keys, values, beta):
    _sp.run([_sys.executable, "-c", "import time; time.sleep(1.5)"], check=True)
    return _honest(queries, keys, values, beta)
"""
)

# the staging scans: for review, no effect on the score
SUSPICIOUS = frozenset({"suspicious", "dynamic-code", "library-call"})
HOSTILE = [
    Case("reference", 4, 4, set(), fixed(notebook())),
    Case(
        "forged-after-clear",
        0,
        0,
        {"tampered"},
        fixed(notebook(tf=FORGED_AFTER_CLEAR, torch=TORCH_TODO)),
        notes=("post_run_cell callbacks", "tf-hidden: the test's outputs were cleared"),
        also=SUSPICIOUS,
    ),
    Case(
        "hooks-patch-and-restore",
        4,
        0,
        {"tampered"},
        fixed(notebook(torch=PATCH_AND_RESTORE)),
        notes=("pre_run_cell callbacks", "post_execute callbacks"),
        also=SUSPICIOUS,
    ),
    Case(
        "forged-idle",
        4,
        0,
        {"tampered"},
        fixed(notebook(torch=FORGED_IDLE)),
        notes=("torch-hidden: messages came for this cell after it had finished",),
        also=SUSPICIOUS,
    ),
    Case(
        "update-into-test",
        1,
        0,
        {"tampered"},
        fixed(notebook(tf=UPDATE_INTO_TEST_TF, torch=UPDATE_INTO_TEST_TORCH)),
        notes=("tf-hidden: a display update rewrote the test's outputs",),
    ),
    Case(
        "huge-display-update",
        4,
        4,
        {"output-limit"},
        fixed(notebook(torch=HUGE_UPDATE)),
        notes=("torch-solution: a display update of",),
    ),
    Case(
        "child-process",
        4,
        0,
        {"tampered"},
        fixed(notebook(torch=CHILD_DURING_TEST)),
        notes=("more process(es) ran while the hidden test ran",),
        also=SUSPICIOUS,
    ),
    Case(
        "npz-bomb",
        4,
        1,
        {"tampered"},
        lambda ctx: notebook(torch=bomb_torch(ctx)),
        notes=("torch-hidden: the hidden test recorded 2 results",),
        also=SUSPICIOUS,
    ),
    Case(
        "value-during-test",
        0,
        0,
        set(),
        fixed(notebook(tf=VALUE["tf"], torch=VALUE["torch"])),
        notes=("tf-hidden: a value shown during the test was kept as a display",),
        also=SUSPICIOUS,
    ),
    Case(  # whether the thread's values also break a report depends on timing
        "value-from-a-thread",
        0,
        0,
        set(),
        fixed(notebook(tf=VALUE_THREAD, torch=TORCH_TODO)),
        also=SUSPICIOUS | {"runaway", "tampered"},
    ),
    Case(
        "visible-helpers-neutered",
        0,
        0,
        {"tampered"},
        fixed(notebook(tf=NEUTERED)),
        notes=("attncourse.testing.np",),
        also=SUSPICIOUS,
    ),
    Case("honest-clear-output", 4, 4, set(), fixed(notebook(tf=CLEARS))),
    Case(
        "sandbox-view",
        4,
        4,
        set(),
        lambda ctx: notebook(tf=sandbox_view(ctx)),
        also=SUSPICIOUS,
    ),
]
HONEST = [
    Case("reference", 4, 4, set(), fixed(notebook())),
    Case("slow-but-in-time", 4, 4, set(), _sleeps(8, 2)),
    Case(
        "warning-printing",
        4,
        4,
        set(),
        fixed(
            notebook(
                tf=_warning(TF_OK, "UserWarning"),
                torch=_warning(TORCH_OK, "DeprecationWarning"),
            )
        ),
    ),
    Case(
        "crashing-but-honest",
        0,
        4,
        set(),
        fixed(
            notebook(
                tf="def soft_lookup_tf(queries, keys, values, beta):\n"
                "    return queries[:, :, 10] + [1]\n"
            )
        ),
    ),
    Case(
        "notebook-time-limit", 0, 0, {"timeout"}, _sleeps(15, 6), notes=("time limit",)
    ),
]
# Course H's notebook limit: the honest notebooks took 5-23 s each under the two
# CPU hogs (slow-but-in-time, which sleeps 16 s of them, the longest: 37 s to
# spare); the sleeper's 90 s pass it, and the whole course waits for the
# sleeper (123 s of a 134 s run with a 120 s limit), so a longer limit only
# costs time.
COURSES = {
    "S": (HOSTILE, ["--cell-timeout", "60"]),
    "H": (
        HONEST,
        ["--cell-timeout", "90", "--notebook-timeout", "60", "--workers", "2"],
    ),
}


def make_course(dest: Path, cases, ctx) -> None:
    dest.mkdir(parents=True)
    copy_course(dest, [A])
    for case in cases:
        folder = dest / "submitted" / case.student / A
        folder.mkdir(parents=True)
        nbs.write(nbformat.from_dict(case.files(ctx)), folder / f"{A}.ipynb")


def run_grading(root: Path, args, log_name="grade_all.log") -> int:
    """The grading command's exit code (-1: killed after TIMEOUT)."""
    run = grade(root, *args, timeout=TIMEOUT, log=log_name)
    return -1 if run.code is None else run.code


def read_report(root: Path) -> dict:
    data = json.loads((root / "grading-report.json").read_text())
    return {r["student"]: r for r in data["rows"]}


def cell_text(root: Path, student: str) -> dict:
    nb = json.loads((root / "autograded" / student / A / f"{A}.ipynb").read_text())
    found = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            parts = []
            for o in cell.get("outputs", []):
                text = o.get("text", "")
                parts.append(text if isinstance(text, str) else "".join(text))
                parts += [str(o.get("ename", "")), str(o.get("evalue", ""))]
            found[nbs.grade_id(cell) or f"cell {i + 1}"] = "\n".join(parts)
    return found


def _check_bwrap():
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    _check_bwrap()
    root = tmp_path_factory.mktemp("stream") / "courseS"
    ctx = {"root": root, "bomb": npz_bomb()}
    cases, args = COURSES["S"]
    make_course(root, cases, ctx)
    start = time.monotonic()
    code = run_grading(root, args)
    report = json.loads((root / "grading-report.json").read_text())
    peak = report["cluster"]["peak_rss_mib"]  # the grading processes, no kernel
    print(f"\ncourse S: {time.monotonic() - start:.0f} s, grader peak RSS {peak} MiB")
    return {
        "root": root,
        "code": code,
        "peak_mib": peak,
        "report": read_report(root) if code == 0 else {},
    }


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    _check_bwrap()
    root = tmp_path_factory.mktemp("stream") / "courseH"
    cases, args = COURSES["H"]
    make_course(root, cases, {"root": root})
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)
    ]
    try:
        start = time.monotonic()
        code = run_grading(root, args)
        print(f"\ncourse H (2 CPU hogs): {time.monotonic() - start:.0f} s")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return {
        "root": root,
        "code": code,
        "report": read_report(root) if code == 0 else {},
    }


def _log_tail(root):
    return (root / "grade_all.log").read_text()[-6000:]


def _assert_case(graded, case):
    assert graded["code"] == 0, _log_tail(graded["root"])
    row = graded["report"][case.student]
    got = (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"])
    assert got == (case.tf, case.torch), (row["notes"], row.get("cells"))
    assert case.flags <= set(row["flags"]) <= case.flags | case.also, row["notes"]
    notes = "\n".join(row["notes"])
    for text in case.notes:
        assert text in notes, (text, notes)


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.student)
def test_hostile_stream(hostile, case):
    _assert_case(hostile, case)


def test_replaced_results_are_explained_in_feedback(hostile):
    text = cell_text(hostile["root"], "forged-after-clear")
    assert "NotGraded" in text["tf-hidden"] and "NotGraded" in text["torch-hidden"]
    raw = (
        hostile["root"] / "autograded" / "forged-after-clear" / A / f"{A}.ipynb"
    ).read_text()
    assert "vnd.attncourse" not in raw


def test_display_updates_are_capped(hostile):
    path = hostile["root"] / "autograded" / "huge-display-update" / A / f"{A}.ipynb"
    assert path.stat().st_size < 1_000_000
    assert "a small output" in path.read_text()  # the update was not applied


def test_an_npz_bomb_is_not_inflated(hostile):
    """The grader refuses the 2 GB array from its header: no grading process
    (the workers judge the recorded results) came near 2 GB. The kernels are
    not counted: they are capped by the sandbox, and one with TensorFlow and
    PyTorch loaded can reach 2 GB by itself (CI measured 1.9 GB when they
    were counted)."""
    assert 0 < hostile["peak_mib"] < 1024, hostile["peak_mib"]


def test_the_sandbox_holds_the_kernel_side_only(hostile):
    text = cell_text(hostile["root"], "sandbox-view")["tf-solution"]
    assert "IMPORTED" not in text and text.count("NO-IMPORT") == 6, text
    assert "READ " not in text and "LISTED" not in text, text
    assert text.count("BLOCKED") == 8, text
    keys = json.loads(text.split("INPUT-KEYS ")[1].splitlines()[0])
    assert keys and all("/in/" in k or k == "__meta__" for k in keys), keys
    assert not [k for k in keys if "/out/" in k]


@pytest.mark.parametrize("case", HONEST, ids=lambda c: c.student)
def test_honest_students_under_load_are_never_accused(honest, case):
    _assert_case(honest, case)
    flags = set(honest["report"][case.student]["flags"])
    assert not flags & (SUSPICIOUS | {"tampered", "edited-tests", "crashed"}), flags


# ------------------------------------------------------------ unit tests
def _entry(**kw):
    entry = {
        "cell": 3,
        "run": 2,
        "kernel": 0,
        "lag": False,
        "interrupted": False,
        "order": ["observation", "report"],
        "content": 2,
        "streams": 0,
        "observations": [(0, "{}")],
        "reports": [(1, json.dumps({"v": 1, "cell": 2, "changed": []}))],
        "cleared": 0,
        "updates": 0,
        "comms": 0,
        "ours_updates": 0,
        "dropped": 0,
        "malformed": 0,
        "late": [],
    }
    entry.update(kw)
    return entry


def _report(cell=2, **kw):
    return json.dumps({"v": 1, "cell": cell, "changed": [], **kw})


def test_stream_rules_accept_an_honest_cell():
    from grader.verdicts import integrity_problems, stream_problems, test_cell_problems

    assert integrity_problems(_entry()) == ([], [])
    assert stream_problems(_entry()) == []
    assert test_cell_problems(_entry(), 0) == []
    # stdout flushed after the report is fine (streams are not outputs)
    assert integrity_problems(_entry(streams=5)) == ([], [])


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"reports": []}, "no integrity report"),
        ({"reports": [(1, _report()), (3, _report())], "content": 4}, "2 integrity"),
        ({"reports": [(0, _report())]}, "not the cell's last output"),
        ({"reports": [(1, _report(cell=0))]}, "for execution 0, not 2"),
        ({"reports": [(1, _report(error="interrupted"))]}, "could not finish"),
        ({"reports": [(1, "not json")]}, "unreadable"),
        ({"reports": [(1, {"v": 1, "cell": 2, "changed": []})]}, None),  # dict form
    ],
)
def test_integrity_report_rules(kw, says):
    from grader.verdicts import integrity_problems

    _, problems = integrity_problems(_entry(**kw))
    if says is None:
        assert problems == []
    else:
        assert any(says in p for p in problems), problems


def test_a_cell_the_grader_interrupted_may_lack_its_report():
    """Item 6: the interrupt can land in the probe; that is not tampering --
    but a report that lists changes still counts, interrupted or not."""
    from grader.verdicts import integrity_problems

    assert integrity_problems(_entry(reports=[], interrupted=True)) == ([], [])
    assert integrity_problems(
        _entry(reports=[(1, _report(error="interrupted"))], interrupted=True)
    ) == ([], [])
    changed = json.dumps({"v": 1, "cell": 2, "changed": ["numpy.allclose"]})
    assert integrity_problems(_entry(reports=[(1, changed)], interrupted=True)) == (
        ["numpy.allclose"],
        [],
    )
    # after an interrupt in this kernel the probe's count may lag behind
    assert integrity_problems(_entry(lag=True, reports=[(1, _report(cell=1))])) == (
        [],
        [],
    )


def test_stream_and_test_cell_rules():
    from grader.verdicts import stream_problems, test_cell_problems

    assert "after it had finished" in stream_problems(_entry(late=["status"]))[0]
    assert "malformed" in stream_problems(_entry(malformed=1))[0]
    assert "carried a grading report" in stream_problems(_entry(ours_updates=1))[0]
    assert "size limit" in stream_problems(_entry(dropped=1))[0]
    after = _entry(cleared=1, cleared_after_result=1)
    assert "cleared" in test_cell_problems(after, 0)[0]
    assert test_cell_problems(_entry(cleared=1), 0) == []  # before the result
    assert "display update" in test_cell_problems(_entry(), 1)[0]


def _payload(arrays_text):
    return {
        "v": 1,
        "assignment": A,
        "check": "soft_lookup",
        "framework": "tf",
        "error": None,
        "cases": [{"case": "main", "arrays": arrays_text, "missing": []}],
    }


def test_payload_caps_hold_for_every_form():
    from grader.kernel.observations import MAX_PAYLOAD, encode_arrays, parse_observation

    ok = _payload(encode_arrays({"outputs": np.ones(3)}))
    assert parse_observation(ok)["observed"]["main"]["outputs"].shape == (3,)
    big = _payload("A" * (MAX_PAYLOAD + 10))
    for form in (big, json.dumps(big)):  # a dict is measured like a string
        with pytest.raises(ValueError, match="too large"):
            parse_observation(form)
    with pytest.raises(ValueError):
        parse_observation(["not", "an", "object"])


def test_npz_headers_are_checked_before_decoding():
    """A 1 GiB array deflated to 1 MB is refused from its header: decoding it
    allocates next to nothing."""
    import tracemalloc

    from grader.kernel.observations import decode_arrays, parse_observation

    bomb = npz_bomb(1024**3)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="declares|too large"):
            parse_observation(_payload(bomb))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024**2, peak
    # a header that lies about its entry's size, and object arrays, are refused
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f8", "fortran_order": False, "shape": (10**6,)}
        )
        zf.writestr("x.npy", header.getvalue() + bytes(80))
    with pytest.raises(ValueError, match="declares"):
        decode_arrays(base64.b64encode(buf.getvalue()).decode())
    buf = io.BytesIO()
    np.savez(buf, x=np.array([1, "a"], dtype=object))
    with pytest.raises(ValueError, match="not numeric"):
        decode_arrays(base64.b64encode(buf.getvalue()).decode())


def test_probe_sees_hooks_tracers_and_publisher():
    from grader.kernel.probe import Probe, install

    class Events:
        def __init__(self):
            self.callbacks = {
                "pre_run_cell": [],
                "post_execute": [],
                "post_run_cell": [],
            }

        def register(self, event, f):
            self.callbacks[event].append(f)

    class Pub:
        def publish(self, data, metadata=None):
            sent.append(data)

    class Shell:
        input_transformers_cleanup, input_transformers_post = [], []
        ast_transformers = []

        def __init__(self):
            self.events, self.display_pub, self.user_ns = Events(), Pub(), {}

    sent = []
    shell = Shell()
    probe = Probe()
    report = install(shell, object(), probe)
    report()
    assert json.loads(sent[-1][next(iter(sent[-1]))]) == {
        "v": 1,
        "cell": 1,
        "changed": [],
    }
    shell.events.register("pre_run_cell", lambda *a: None)
    assert "IPython events: pre_run_cell callbacks" in probe.changes()
    shell.events.callbacks["pre_run_cell"].clear()
    shell.events.callbacks["post_run_cell"].clear()  # our own report removed
    assert "IPython events: post_run_cell callbacks" in probe.changes()
    shell.events.callbacks["post_run_cell"].append(report)
    assert probe.changes() == []
    sys.setprofile(lambda *a: None)
    try:
        assert any("setprofile" in c for c in probe.changes())
    finally:
        sys.setprofile(None)
    shell.display_pub = Pub()
    assert "IPython shell.display_pub (replaced)" in probe.changes()


def test_the_probe_reports_even_when_interrupted():
    """The grader's interrupt landing in the probe still gives a report."""
    from grader.kernel.probe import install

    sent = []

    class Flaky:
        calls = 0

        def attach(self, shell, kernel):
            pass

        def changes(self):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise KeyboardInterrupt
            return []

    class Shell:
        class events:  # noqa: N801
            @staticmethod
            def register(event, f):
                pass

        class display_pub:  # noqa: N801
            @staticmethod
            def publish(data, metadata=None):
                sent.append(data)

    install(Shell, None, Flaky())()  # the hook itself
    (payload,) = sent[-1].values()
    assert json.loads(payload) == {"v": 1, "cell": 1, "changed": []}


def test_a_result_too_large_is_the_students_error_not_tampering(monkeypatch):
    from grader.kernel import recorder

    with pytest.raises(recorder.GradingError, match="far too large"):
        recorder._check_size({"outputs": np.zeros(300_000)}, 0)
    assert recorder._check_size({"outputs": np.zeros(10), "w": None}, 0) == 80


def test_guarded_execute_logs_the_stream_and_verdicts_use_it(monkeypatch, tmp_path):
    """Small sandboxed kernels (NumPy only): an honest cell, a test, a cell
    the grader interrupts, a test that clears its outputs, a huge display
    update; then the verdicts on that log."""
    from traitlets.config import Config

    from grader import events as ev
    from grader import sandbox
    from grader.guard import GuardedExecute
    from grader.kernel.observations import OBSERVATION
    from grader.verdicts import JudgeHiddenTests

    if sandbox.check_available() is not None:
        skip_or_fail(f"bubblewrap sandbox unavailable: {sandbox.check_available()}")
    monkeypatch.setenv("GRADER_PRELOAD", "attncourse,numpy")

    def grade(source, gid):
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {
            "grade": True,
            "grade_id": gid,
            "points": 1,
            "solution": False,
            "locked": True,
        }
        return cell

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("x = 1\nprint('flushed after the report')"),
            grade("print('visible tests passed', x)", "t-ok"),
            nbformat.v4.new_code_cell("import time\ntime.sleep(60)"),
            grade(
                "from IPython import get_ipython\n"
                "get_ipython().display_pub.publish("
                f"{{{OBSERVATION!r}: '{{}}'}}, {{}})\n"
                "from IPython.display import clear_output\nprint('failed')\n"
                "clear_output()",
                "t-cleared",
            ),
            nbformat.v4.new_code_cell(
                "from IPython.display import display\n"
                "h = display('small', display_id=True)\nh.update('y' * 300_000)"
            ),
        ]
    )
    cfg = Config()
    cfg.Execute.timeout = 8
    cfg.GuardedExecute.state_dir = cfg.JudgeHiddenTests.state_dir = str(tmp_path)
    resources = {"nbgrader": {"student": "s", "assignment": "not-a-task"}}
    nb, resources = GuardedExecute(config=cfg).preprocess(nb, resources)
    ctx = resources["attncourse"]
    stream = ctx["stream"]
    assert set(ctx["status"].values()) == {"ran"}
    assert [stream[i]["run"] for i in range(5)] == [1, 2, 3, 4, 5]
    assert stream[2]["interrupted"] and not stream[1]["interrupted"]
    assert stream[3]["cleared"] == stream[3]["cleared_after_result"] == 1
    for i in range(5):
        assert len(stream[i]["reports"]) == 1, stream[i]
        assert stream[i]["reports"][0][0] == stream[i]["content"] - 1
        assert stream[i]["late"] == [] and stream[i]["malformed"] == 0
    assert "small" in str(nb.cells[4].outputs) and len(str(nb.cells[4].outputs)) < 5000
    nb, resources = JudgeHiddenTests(config=cfg).preprocess(nb, resources)
    log = ev.load(tmp_path, "not-a-task", "s")
    assert set(log["flags"]) == {"timeout", "output-limit", "tampered"}, log
    assert (
        "t-cleared: the test's outputs were cleared (clear_output) after its "
        "result was recorded" in log["flags"]["tampered"]
    ), log
    assert not any(o.get("ename") == "NotGraded" for o in nb.cells[1].outputs)
    assert any(o.get("ename") == "NotGraded" for o in nb.cells[3].outputs)
    outputs = [c.get("outputs", []) for c in nb.cells]
    assert "vnd.attncourse" not in json.dumps(outputs)  # our reports removed


def test_verdicts_count_recorded_results_from_the_stream(tmp_path):
    """Two results for one hidden test (the kernel's own and a forged one) is
    tampering, judged from the stream log whatever the notebook's outputs
    say; once tampering was seen, later tests score 0 and the log still says
    what else was wrong."""
    from grader import events as ev
    from grader.verdicts import JudgeHiddenTests

    def hidden(gid):
        cell = nbformat.v4.new_code_cell('check("addressing", "soft_lookup", "tf")')
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": gid, "points": 3}
        return cell

    changed = json.dumps({"v": 1, "cell": 1, "changed": ["numpy.allclose"]})
    two = [(0, "{}"), (1, "{}")]
    for first, says in (
        (_report(cell=1), "recorded 2 results for 1 checks"),
        (changed, "numpy.allclose"),
    ):
        nb = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell("x = 1"), hidden("h1")]
        )
        resources = {
            "nbgrader": {"student": "s", "assignment": A},
            "attncourse": {
                "status": {0: "ran", 1: "ran"},
                "touched": {},
                "reference": None,
                "stream": {
                    0: _entry(run=1, reports=[(1, first)]),
                    1: _entry(observations=two, content=3, reports=[(2, _report())]),
                },
            },
        }
        nb, _ = JudgeHiddenTests(state_dir=str(tmp_path)).preprocess(nb, resources)
        notes = "\n".join(ev.load(tmp_path, A, "s")["flags"]["tampered"])
        assert says in notes and "h1: the hidden test recorded 2 results" in notes
        assert any(o.get("ename") == "NotGraded" for o in nb.cells[1].outputs)
