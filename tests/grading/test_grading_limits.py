"""Resource limits of the whole sandbox, through the real grading command.

Per-process rlimits (address space, file size) can be stepped around by
spreading the load: many processes each under the memory limit, many files
each under the file-size limit, or files in a subfolder of the one folder the
kernel shares with the grader. One temporary course of ``addressing`` is
graded with ``python -m grader grade``, one student per way around:

* ``socket-folder-filler`` writes 1 GiB into a subfolder of its socket folder
  (it finds the folder from its connection file): it must fill at most the
  sandbox's small socket tmpfs, be killed and be flagged ``disk``;
* ``file-flood`` creates 30 000 empty files in its /tmp (a tmpfs limits
  bytes, not files, and each file costs kernel memory): ``disk``;
* ``forked-memory`` forks 8 children that each allocate and touch 700 MB,
  each under the 4 GiB address-space limit, 5.6 GB together: killed at the
  sandbox's total-memory limit (4 GiB by default) and flagged ``memory``.

A reference student proves an honest kernel is never flagged, and the log
says its peak memory and socket-folder use. The repository is not touched.
The fast accounting tests are in ``test_limits_units.py``.
"""

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import run_grader
from support.ci import skip_or_fail
from support.grading import ROOT, student_solutions

from grader import notebooks as nbs
from grader import sandbox

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

A = "addressing"
CELL_TIMEOUT = 30  # seconds per cell
TIMEOUT = 900  # seconds for the whole grading run

RELEASE = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
REF = student_solutions(A, "reference")
TF_OK, TORCH_OK = REF["tf-solution"], REF["torch-solution"]

SOCKET_FOLDER_FILLER = (
    """\
import json
import os
import sys
import time

connection = sys.argv[sys.argv.index("-f") + 1]
folder = os.path.dirname(json.load(open(connection))["ip"])
os.makedirs(f"{folder}/d/e", exist_ok=True)
written = 0
try:
    for i in range(64):
        with open(f"{folder}/d/e/f{i}", "wb") as f:
            f.write(b"x" * 16 * 2**20)
        written += 16
except OSError as e:
    print("STOPPED", type(e).__name__)
print("WROTE", written, "MiB", flush=True)
time.sleep(10)
"""
    + TORCH_OK
)

FILE_FLOOD = (
    """\
import os
import time

os.makedirs("/tmp/flood", exist_ok=True)
for i in range(30_000):
    open(f"/tmp/flood/{i}", "w").close()
print("CREATED 30000 files", flush=True)
time.sleep(10)
"""
    + TF_OK
)

FORKED_MEMORY = (
    """\
import os
import time

children = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        block = b"\\x01" * (700 * 2**20)  # allocated and touched
        time.sleep(12)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("ALL CHILDREN DONE", flush=True)
"""
    + TORCH_OK
)


@dataclass
class Case:
    student: str
    tf: float  # expected TensorFlow points (of 4)
    torch: float  # expected PyTorch points (of 4)
    flags: set  # flags the report must show
    also: set  # flags it may show besides
    solutions: dict  # grade id -> code (the reference for the others)
    notes: tuple = ()  # substrings the report's notes must contain


CASES = [
    Case("reference", 4, 4, set(), set(), {}),
    Case(
        "socket-folder-filler",
        4,
        0,
        {"disk", "crashed"},
        {"suspicious"},
        {"torch-solution": SOCKET_FOLDER_FILLER},
        notes=("torch-solution: the kernel wrote", "socket folder"),
    ),
    Case(
        "file-flood",
        0,
        4,
        {"disk", "crashed"},
        {"suspicious"},
        {"tf-solution": FILE_FLOOD},
        notes=("files in /tmp",),
    ),
    Case(
        "forked-memory",
        4,
        0,
        {"memory", "crashed"},
        {"suspicious", "runaway"},
        {"torch-solution": FORKED_MEMORY},
        notes=("torch-solution: the kernel's", "(limit 4 GiB)"),
    ),
]


def make_course(dest: Path, cases=CASES, grader_src: Path = ROOT / "grader") -> None:
    dest.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "attncourse", dest / "attncourse", ignore=ignore)
    shutil.copytree(grader_src, dest / "grader", ignore=ignore)
    shutil.copytree(
        ROOT / "solutions" / A,
        dest / "solutions" / A,
        ignore=shutil.ignore_patterns("grader-errors.log"),
    )
    for case in cases:
        nb = nbs.submission(RELEASE, dict(REF, **case.solutions))
        nbs.write(nb, dest / "submitted" / case.student / A / f"{A}.ipynb")


def grade(root: Path, *args, timeout=TIMEOUT) -> int:
    """The grading command's exit code (-1: killed after ``timeout``)."""
    run = run_grader.grade(
        root, "--cell-timeout", str(CELL_TIMEOUT), *args, timeout=timeout
    )
    return -1 if run.code is None else run.code


def read_report(root: Path) -> dict:
    data = json.loads((root / "grading-report.json").read_text())
    return {r["student"]: r for r in data["rows"]}


def cell_text(root: Path, student: str) -> dict:
    nb = json.loads((root / "autograded" / student / A / f"{A}.ipynb").read_text())
    found = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and nbs.grade_id(cell):
            found[nbs.grade_id(cell)] = "\n".join(
                "".join(o.get("text", "")) + str(o.get("evalue", ""))
                for o in cell.get("outputs", [])
            )
    return found


def peaks(log: str, student: str) -> dict:
    """What the watchdog logged about one student's kernels: peak memory (MiB),
    processes, socket-folder KiB and files, per kernel started."""
    pattern = (
        rf"sandbox {re.escape(student)}/{A}: peak memory (\d+) MiB in "
        rf"(\d+) processes .*?, socket folder (\d+) KiB in (\d+) files"
    )
    found = [tuple(map(int, m)) for m in re.findall(pattern, log)]
    return {
        "memory": [f[0] for f in found],
        "processes": [f[1] for f in found],
        "socket_kib": [f[2] for f in found],
        "socket_files": [f[3] for f in found],
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")
    root = tmp_path_factory.mktemp("limits") / "course"
    make_course(root)
    code = grade(root)
    log = (root / "grade_all.log").read_text()
    assert code == 0, log[-6000:]
    yield {"root": root, "report": read_report(root), "log": log}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.student)
def test_score_and_flags(graded, case):
    row = graded["report"][case.student]
    got = (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"])
    assert got == (case.tf, case.torch), (row["notes"], row.get("cells"))
    assert case.flags <= set(row["flags"]) <= case.flags | case.also, row["notes"]
    notes = "\n".join(row["notes"])
    for text in case.notes:
        assert text in notes, (text, notes)


def test_the_socket_folder_filler_filled_only_its_small_tmpfs(graded):
    text = cell_text(graded["root"], "socket-folder-filler")["torch-solution"]
    assert "WROTE 1024 MiB" not in text, text
    notes = "\n".join(graded["report"]["socket-folder-filler"]["notes"])
    kib = [int(k) for k in re.findall(r"the kernel wrote (\d+) KiB", notes)]
    assert kib and max(kib) <= sandbox.Limits.sockets >> 10, notes


def test_the_forked_children_were_killed_together(graded):
    text = cell_text(graded["root"], "forked-memory")["torch-solution"]
    assert "ALL CHILDREN DONE" not in text and "processes used" in text, text
    notes = "\n".join(graded["report"]["forked-memory"]["notes"])
    used = [float(g) for g in re.findall(r"processes used ([\d.]+) GiB", notes)]
    # The watchdog kills once the total passes the limit, so the figure it
    # prints (rounded to 0.01 GiB) is at least the limit: no child alone
    # came near it (700 MB each), only the processes counted together.
    limit = sandbox.Limits.total_memory / 2**30
    assert used and limit <= max(used) < 2 * limit, notes


def test_the_reference_kernel_stays_far_below_the_limits(graded):
    found = peaks(graded["log"], "reference")
    print(f"\nreference kernel: {found}")
    assert found["memory"], graded["log"][-3000:]
    limit = sandbox.Limits.total_memory / sandbox.MiB
    assert max(found["memory"]) < limit / 2, found
    assert max(found["socket_kib"]) == 0, found
    assert max(found["socket_files"]) <= sandbox.SOCKET_FILES // 4, found
