"""What reaches grading, and what leaves it: hostile input and output.

One temporary course (assignment ``addressing``, 4 + 4 points) is graded with
the real command, ``python -m grader grade``, sandboxed. Its students:

* leaks -- ``hidden-line`` writes the hidden tests' own import line in their
  code (their own text: not a leak, no flag ``leak``); ``leak-printed`` makes
  a hidden-test line appear in its output without writing it (a leak: that
  feedback alone is withheld, the batch completes);
* links -- the notebook a link to the solution notebook or to a peer's, the
  exchange secret a link to the course's HMAC secret, the assignment folder
  and the student folder links, a FIFO as the notebook: never followed, flag
  ``link``, the rest graded;
* bounds -- a 33 MiB notebook, a deeply nested one, odd file names,
  pre-filled (forged) outputs;
* ready-made attention -- the course library's ``soft_attention`` and a
  computed ``getattr``: flagged ``library-call`` / ``dynamic-code``, score
  unchanged.

Before grading, the other ways into autograde are tried on the same course:
plain ``nbgrader autograde``, the formgrader's API call (``NbGraderAPI.autograde``,
what its *autograde* button posts to) and a staged copy with a forged
manifest; each must refuse and write no score. Fast unit tests of the scanner,
the staging reads, the provenance check and the manifest follow (not marked).
"""

import csv
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from support.ci import skip_or_fail
from support.grading import (
    ROOT,
    copy_course,
    environment,
    read_report,
    release_notebook,
    student_solutions,
)

from grader import entry, fresh, leaks, provenance, staging
from grader import events as ev
from grader import notebooks as nbs

A = "addressing"
CELL_TIMEOUT = 60
TIMEOUT = 1500
RELEASE = release_notebook(A)
REF = student_solutions(A, "reference")
HIDDEN_LINE = "from grader.kernel import check"

LIBRARY_TORCH = '''\
from attncourse.torch import soft_attention


def soft_lookup_torch(queries, keys, values, beta):
    """Soft dictionary lookup with scores -beta * ||q - k||^2 (PyTorch)."""
    diff = queries[:, :, None, :] - keys[:, None, :, :]
    return soft_attention(-beta * diff.pow(2).sum(dim=-1), values)
'''
DYNAMIC_TF = '''\
import attncourse.tf as atf

_pool = getattr(atf, "soft_" + "attention")


def soft_lookup_tf(queries, keys, values, beta):
    """Soft dictionary lookup with scores -beta * ||q - k||^2 (TensorFlow)."""
    diff = queries[:, :, None, :] - keys[:, None, :, :]
    return _pool(-beta * tf.reduce_sum(tf.square(diff), axis=-1), values)
'''
ZEROS_TORCH = """\
def soft_lookup_torch(queries, keys, values, beta):
    weights = torch.zeros(queries.shape[0], queries.shape[1], keys.shape[1])
    return torch.zeros(queries.shape[0], queries.shape[1], values.shape[-1]), weights
"""
ODD_NAMES = [
    "new\nline.txt",
    "-rf",
    "back`tick|pipe.py",
    "x" * 200 + ".txt",
    "tab\there.txt",
]


def notebook(tf=None, torch=None) -> dict:
    solutions = dict(REF)
    if tf is not None:
        solutions["tf-solution"] = tf
    if torch is not None:
        solutions["torch-solution"] = torch
    return nbs.submission(RELEASE, solutions)


def dump(nb) -> bytes:
    return (json.dumps(nb, indent=1) + "\n").encode()


def prefilled() -> dict:
    """A zero PyTorch part whose test cells carry forged passing outputs."""
    from grader.kernel.observations import OBSERVATION

    nb = notebook(torch=ZEROS_TORCH)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["execution_count"] = 4242
            cell["outputs"] = [
                {
                    "output_type": "stream",
                    "name": "stdout",
                    "text": "visible tests passed\n",
                },
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {
                        OBSERVATION: json.dumps({"forged": "prefilled"}),
                        "text/plain": "ok",
                    },
                },
            ]
    return nb


def nested(depth: int) -> dict:
    nb = notebook()
    deep: dict = {}
    node = deep
    for _ in range(depth):
        node["x"] = {}
        node = node["x"]
    nb["metadata"]["deep"] = deep
    return nb


def make_course(root: Path) -> dict:
    """The course and its submissions; returns facts the tests check."""
    copy_course(root, [A])
    state = root / ".grading"
    secret = fresh.secret(state).decode()  # made now: a link may point at it
    sub = root / "submitted"

    def put(student, name, data):
        path = sub / student / A / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    put("reference", f"{A}.ipynb", dump(notebook()))
    put(
        "hidden-line",
        f"{A}.ipynb",
        dump(
            notebook(
                tf=HIDDEN_LINE + "  # as in the hidden tests\n\n" + REF["tf-solution"]
            )
        ),
    )
    printed = '\nprint("from grader.kernel", "import check")\n'
    put(
        "leak-printed",
        f"{A}.ipynb",
        dump(notebook(torch=REF["torch-solution"] + printed)),
    )
    # links
    (sub / "link-solution" / A).mkdir(parents=True)
    os.symlink(
        root / "solutions" / A / f"{A}.ipynb", sub / "link-solution" / A / f"{A}.ipynb"
    )
    (sub / "link-peer" / A).mkdir(parents=True)
    os.symlink(f"../../reference/{A}/{A}.ipynb", sub / "link-peer" / A / f"{A}.ipynb")
    put("link-secret", f"{A}.ipynb", dump(notebook()))
    os.symlink(state / "secret", sub / "link-secret" / A / staging.SECRET)
    (sub / "link-folder").mkdir()
    os.symlink(f"../reference/{A}", sub / "link-folder" / A)
    os.symlink("reference", sub / "link-student")
    (sub / "fifo" / A).mkdir(parents=True)
    os.mkfifo(sub / "fifo" / A / f"{A}.ipynb")
    # bounds
    huge = notebook()
    huge["metadata"]["padding"] = "x" * (33 * 1024 * 1024)
    put("huge", f"{A}.ipynb", dump(huge))
    put("deep", f"{A}.ipynb", b"[" * 200_000 + b"]" * 200_000)
    put("deep-valid", f"{A}.ipynb", dump(nested(150)))
    put("odd-names", f"{A}.ipynb", dump(notebook()))
    for name in ODD_NAMES:
        put("odd-names", name, b"extra\n")
    with open(
        os.path.join(os.fsencode(sub / "odd-names" / A), b"\xff\xfe.txt"), "wb"
    ) as f:
        f.write(b"not utf-8 name\n")
    put("prefilled", f"{A}.ipynb", dump(prefilled()))
    # ready-made attention
    put(
        "library-call", f"{A}.ipynb", dump(notebook(tf=DYNAMIC_TF, torch=LIBRARY_TORCH))
    )
    return {"secret": secret}


# student -> (tf points, torch points, flags that must be there, allowed extra)
EXPECTED = {
    "reference": (4, 4, set(), set()),
    "hidden-line": (4, 4, {"suspicious"}, set()),
    "leak-printed": (4, 4, {"leak"}, {"suspicious"}),
    "link-solution": (0, 0, {"link"}, set()),
    "link-peer": (0, 0, {"link"}, set()),
    "link-secret": (4, 4, {"link"}, set()),
    "link-folder": (0, 0, {"link"}, set()),
    "link-student": (0, 0, {"link"}, set()),
    "fifo": (0, 0, {"link"}, set()),
    "huge": (0, 0, {"too-large"}, set()),
    "deep": (0, 0, {"malformed"}, set()),
    "deep-valid": (0, 0, {"malformed"}, set()),
    "odd-names": (4, 4, {"extra-files"}, {"shadowing"}),
    "prefilled": (4, 0, set(), set()),
    "library-call": (4, 4, {"library-call", "dynamic-code"}, set()),
}
NOTES = {
    "link-solution": ["is a symbolic link", "not graded"],
    "link-secret": [f"{staging.SECRET} (a symbolic link to"],
    "link-folder": [f"link-folder/{A}/ is a symbolic link"],
    "link-student": ["link-student/ is a symbolic link"],
    "fifo": ["not a file"],
    "huge": ["larger than 32 MiB"],
    "deep": ["nested too deeply"],
    "deep-valid": ["nested more than 100 levels"],
    "odd-names": ["new\\nline.txt", "\\udcff\\udcfe.txt", "tab\\there.txt"],
    "library-call": [
        "attncourse.torch.soft_attention",
        "getattr(attncourse.tf, <computed name>)",
    ],
    "leak-printed": ["feedback withheld", HIDDEN_LINE],
}


def run(root, *args, env=None, timeout=600):
    return subprocess.run(
        [sys.executable, *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or environment(root),
    )


def scores(root: Path, student: str) -> dict:
    """grade id -> auto score of ``student``'s addressing submission ({} if none)."""
    code = f"""
import json
from nbgrader.api import Gradebook, MissingEntry
with Gradebook("sqlite:///{root / "gradebook.db"}", "attention-course") as gb:
    try:
        sub = gb.find_submission({A!r}, {student!r})
        print(json.dumps({{g.name: g.auto_score for nb in sub.notebooks
                           for g in nb.grades}}))
    except MissingEntry:
        print("{{}}")
"""
    out = run(root, "-c", code)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


FORMGRADER = f"""
import json
from nbgrader.apps import NbGraderAPI
from traitlets.config.loader import PyFileConfigLoader

config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
result = NbGraderAPI(config=config).autograde({A!r}, "reference")
print("RESULT" + json.dumps({{k: result.get(k) for k in ("success", "log", "error")}}))
"""


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")
    root = tmp_path_factory.mktemp("inputs") / "course"
    facts = make_course(root)
    env = environment(root)
    nbgrader = ["-m", "grader.nbgrader_cli"]
    attempts = {}
    out = run(root, *nbgrader, "generate_assignment", A, "--force")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    attempts["plain"] = run(root, *nbgrader, "autograde", A, "--student=reference")
    attempts["plain-scores"] = scores(root, "reference")
    attempts["formgrader"] = run(root, "-c", FORMGRADER)
    attempts["formgrader-scores"] = scores(root, "reference")
    # a staged copy with a manifest made without the secret, and a marker
    forged = root / ".grading" / "staged" / "reference" / A
    forged.mkdir(parents=True)
    nb = notebook()
    nb["metadata"]["attncourse"] = {"staged": True, "hmac": "0" * 64}
    (forged / f"{A}.ipynb").write_bytes(dump(nb))
    digest = hashlib.sha256((forged / f"{A}.ipynb").read_bytes()).hexdigest()
    guess = hmac.new(
        b"guessed",
        json.dumps([staging.PURPOSE, "forged-run", "reference", A, A, digest]).encode(),
        hashlib.sha256,
    ).hexdigest()
    (root / ".grading" / staging.MANIFEST).write_text(
        json.dumps(
            {
                "run": "forged-run",
                "notebooks": {staging.manifest_key("reference", A, A): guess},
            }
        )
    )
    attempts["forged"] = run(
        root,
        *nbgrader,
        "autograde",
        A,
        "--student=reference",
        f"--CourseDirectory.submitted_directory={root / '.grading' / 'staged'}",
        env={**env, entry.RUN_ENV: "forged-run"},
    )
    attempts["forged-scores"] = scores(root, "reference")
    start = time.monotonic()
    graded = run(
        root,
        "-m",
        "grader",
        "grade",
        "--cell-timeout",
        str(CELL_TIMEOUT),
        timeout=TIMEOUT,
    )
    print(f"\ngrading {len(EXPECTED)} submissions: {time.monotonic() - start:.0f} s")
    (root / "grade_all.log").write_text(graded.stdout + graded.stderr)
    report = read_report(root) if (root / "grading-report.json").exists() else {}
    return {
        "root": root,
        "graded": graded,
        "report": report,
        "attempts": attempts,
        **facts,
    }


def tail(result) -> str:
    return (result.stdout + result.stderr)[-5000:]


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_batch_completes_for_everyone(course):
    root = course["root"]
    assert course["graded"].returncode == 0, tail(course["graded"])
    assert set(course["report"]) == set(EXPECTED)
    rows = list(csv.DictReader(open(root / "grades.csv")))
    assert set(EXPECTED) <= {r["student_id"] for r in rows if r["assignment"] == A}


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_score_and_flags(course, student):
    tf, torch, flags, extra = EXPECTED[student]
    row = course["report"][student]
    got = (
        row["parts"].get("tf", {}).get("score", 0),
        row["parts"].get("torch", {}).get("score", 0),
    )
    assert got == (tf, torch), row["notes"]
    assert flags <= set(row["flags"]) <= flags | extra, row["notes"]
    notes = "\n".join(row["notes"])
    for text in NOTES.get(student, []):
        assert text in notes, (text, notes)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_leak_withholds_only_that_feedback(course):
    root = course["root"]
    assert not (root / "feedback" / "leak-printed" / A).exists()
    withheld = root / ".grading" / "quarantine" / "leak-printed" / A / f"{A}.html"
    assert HIDDEN_LINE in leaks.html_text(withheld)
    for student in ("reference", "hidden-line", "library-call"):
        page = root / "feedback" / student / A / f"{A}.html"
        assert page.exists(), student
    # the student's own line is in their feedback, and it is not a leak
    assert HIDDEN_LINE in leaks.html_text(
        root / "feedback" / "hidden-line" / A / f"{A}.html"
    )
    assert leaks.scan_feedback(root) == []
    assert "feedback of leak-printed/addressing withheld" in course["graded"].stdout


@pytest.mark.slow
@pytest.mark.sandbox
def test_links_are_never_read_through(course):
    root = course["root"]
    secret = course["secret"].encode()
    solution_lines = leaks.secret_lines(root / "solutions" / A / f"{A}.ipynb")
    for folder in ("feedback", "autograded", ".grading/staged", ".grading/log"):
        for path in (root / folder).rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert secret not in data, path
                assert b"BEGIN SOLUTION" not in data, path
    for student in ("link-solution", "link-peer", "link-folder", "link-student"):
        page = leaks.html_text(root / "feedback" / student / A / f"{A}.html")
        assert "could not be graded" in page, student
        assert not [s for s in solution_lines["solution"] if s in page], student
    assert not (
        root / ".grading" / "staged" / "link-secret" / A / staging.SECRET
    ).exists()
    assert (root / "submitted" / "link-secret" / A / staging.SECRET).is_symlink()


@pytest.mark.slow
@pytest.mark.sandbox
def test_prefilled_outputs_do_not_count(course):
    nb = json.loads(
        (course["root"] / "autograded" / "prefilled" / A / f"{A}.ipynb").read_text()
    )
    assert "prefilled" not in json.dumps(nb)
    assert not [c for c in nb["cells"] if c.get("execution_count") == 4242]
    visible = next(c for c in nb["cells"] if nbs.grade_id(c) == "torch-visible")
    assert [o["output_type"] for o in visible["outputs"]] == ["error"]


@pytest.mark.slow
@pytest.mark.sandbox
def test_odd_names_are_escaped_in_the_report(course):
    md = (course["root"] / "grading-report.md").read_text()
    line = next(x for x in md.splitlines() if "not given to the kernel" in x)
    assert "nline.txt" in line and "tab" in line and "udcff" in line
    assert "new\nline.txt" not in md and "\t" not in md


@pytest.mark.slow
@pytest.mark.sandbox
def test_plain_nbgrader_autograde_refuses(course):
    out = course["attempts"]["plain"]
    assert out.returncode != 0
    assert "refused to autograde reference/addressing" in tail(out)
    assert entry.SAFE_COMMAND in tail(out)
    assert all(v is None for v in course["attempts"]["plain-scores"].values())


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_formgrader_autograde_call_refuses(course):
    out = course["attempts"]["formgrader"]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))
    result = json.loads(line[len("RESULT") :])
    assert result["success"] is False
    assert entry.SAFE_COMMAND in (result["log"] or "") + (result["error"] or "")
    assert all(v is None for v in course["attempts"]["formgrader-scores"].values())


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_forged_staged_copy_is_refused(course):
    out = course["attempts"]["forged"]
    assert out.returncode != 0
    assert "changed or forged" in tail(out)
    assert all(v is None for v in course["attempts"]["forged-scores"].values())


# ================================================================ fast units
class Quiet:
    def __init__(self):
        self.flags, self.notes = {}, []

    def flag(self, name, note=""):
        assert name in ev.FLAGS, name
        self.flags.setdefault(name, []).append(note)

    def note(self, text):
        self.notes.append(text)


def template():
    return nbformat.from_dict(RELEASE)


def folder_with(tmp_path, files: dict) -> Path:
    folder = tmp_path / "s" / A
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


# -------------------------------------------------------------- the scanner
ADVERSARIAL = {
    "lt": "<" * 140_000,
    "lt-a": "<a" * 70_000,
    "script": "<script " * 20_000,
    "unclosed": "<script></scrip" * 10_000,
    "empty-tags": "<>" * 70_000,
    "style": "<style" * 25_000 + "</style>",
    "mixed": "<style <script " * 10_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_visible_text_is_linear(name):
    """Characters examined, counted by the scanner itself: at most 4 per input
    character whatever the input (the old regular expressions took 8.6 s on
    140 KB of '<')."""
    text = ADVERSARIAL[name]
    work = leaks.Work()
    leaks.visible_text(text, work)
    assert work.chars <= 4 * len(text) + 64, (work.chars, len(text))


def test_visible_text_matches_the_old_regular_expressions():
    import html
    import random
    import re

    def old(raw):
        raw = re.sub(r"<(style|script)\b.*?</\1>", " ", raw, flags=re.S | re.I)
        return html.unescape(re.sub(r"<[^>]+>", "", raw))

    rng = random.Random(0)
    alphabet = [
        "<",
        ">",
        "a",
        " ",
        "<script>",
        "</script>",
        "<style x>",
        "</STYLE>",
        "<scripts>",
        "&lt;",
        "\n",
        "</script",
        "<b>",
        "<Script",
        "</sCript>",
    ]
    for _ in range(5000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        assert leaks.visible_text(s) == old(s), s


def test_reference_numbers_by_binary_search():
    ref = np.array([0.5, -1.25, 3.0])
    found = np.array([0.50001, 0.6, -1.2500001, 2.9, 3.0003])
    assert leaks.close_to(found, ref).tolist() == [0.50001, -1.2500001]
    many = np.linspace(-5, 5, 300_000)  # no matrix of 300k x refs
    assert leaks.close_to(many, ref).size > 0


def test_round_numbers_are_not_leaks():
    # A tanh state of 0.99995 in the reference is within rtol of the row sums
    # 1.0000 an honest visible test prints; its digits, 0.9999(5), are a leak.
    ref = np.array([0.99995, -0.25001, 0.123456])
    page = "row sums 1.0000 1.0000, uniform -0.2500, mean 0.1235"
    assert leaks.scan_text(page, {}, ref, "p") == []
    for leaked in ("0.99995", "-0.25001", "0.123456"):
        found = leaks.scan_text(f"{page} {leaked}", {}, ref, "p")
        assert found == [f"p: a reference number appears ({float(leaked)!r})"]


def test_own_text_is_not_a_leak():
    secrets = {"hidden": [HIDDEN_LINE, 'check("addressing", "soft_lookup", "tf")']}
    page = f"{HIDDEN_LINE}\nresult 0.123456\n"
    assert leaks.scan_text(page, secrets, np.array([0.123456]), "p") != []
    own = f"x = 1\n{HIDDEN_LINE}  # mine\nprint(0.123456)"
    assert leaks.scan_text(page, secrets, np.array([0.123456]), "p", own) == []
    leaked = page + 'check("addressing", "soft_lookup", "tf")'
    assert leaks.scan_text(leaked, secrets, np.zeros(0), "p", own) == [
        'p: hidden code: \'check("addressing", "soft_lookup", "tf")\''
    ]


def test_student_text_leaves_out_instructor_cells(tmp_path):
    nb = nbs.read(ROOT / "solutions" / A / f"{A}.ipynb")  # hidden tests inside
    path = tmp_path / "graded.ipynb"
    nbs.write(nb, path)
    own = leaks.student_text(path)
    assert "def soft_lookup_tf" in own and HIDDEN_LINE not in own


def test_quarantine_moves_the_page(tmp_path):
    page = tmp_path / "feedback" / "s" / A / f"{A}.html"
    page.parent.mkdir(parents=True)
    page.write_text("x")
    moved = leaks.quarantine(tmp_path, tmp_path / "q", "s", A)
    assert moved == tmp_path / "q" / "s" / A and (moved / f"{A}.html").exists()
    assert not page.parent.exists()


# ------------------------------------------------------------------ staging
def test_links_anywhere_are_refused_and_not_read(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("SECRET")
    folder = folder_with(tmp_path, {f"{A}.ipynb": dump(notebook())})
    (folder / "sub").mkdir()
    os.symlink(outside, folder / "sub" / "data.txt")
    os.symlink(outside, folder / staging.SECRET)
    os.symlink(tmp_path, folder / "up")
    q = Quiet()
    path = staging.stage_one(folder, tmp_path / "out", A, {A: template()}, q)
    assert path is not None  # the notebook itself is a file: graded
    note = " ".join(q.flags["link"])
    for name in ("sub/data.txt", staging.SECRET, "up"):
        assert name in note, note
    assert not (tmp_path / "out" / staging.SECRET).exists()
    assert "SECRET" not in "".join(p.read_text() for p in (tmp_path / "out").iterdir())


def test_a_linked_notebook_or_folder_is_not_graded(tmp_path):
    real = tmp_path / "real.ipynb"
    real.write_bytes(dump(notebook()))
    folder = folder_with(tmp_path, {})
    os.symlink(real, folder / f"{A}.ipynb")
    q = Quiet()
    assert staging.stage_one(folder, tmp_path / "out", A, {A: template()}, q) is None
    assert "is a symbolic link" in " ".join(q.flags["link"])
    assert "renamed" not in q.flags
    os.symlink(folder, tmp_path / "linked")
    q = Quiet()
    assert (
        staging.stage_one(tmp_path / "linked", tmp_path / "o2", A, {A: template()}, q)
        is None
    )
    assert "link" in q.flags


def test_stage_refuses_linked_student_and_assignment_folders(tmp_path):
    root = tmp_path / "course"
    (root / "exercises" / A).mkdir(parents=True)
    nbs.write(RELEASE, root / "exercises" / A / f"{A}.ipynb")
    good = root / "submitted" / "good" / A
    good.mkdir(parents=True)
    (good / f"{A}.ipynb").write_bytes(dump(notebook()))
    os.symlink("good", root / "submitted" / "alias")
    (root / "submitted" / "folder").mkdir()
    os.symlink(good, root / "submitted" / "folder" / A)
    staged = {s.student: s for s in staging.stage(root, tmp_path / "state", [A])}
    assert staged["good"].notebook is not None
    for student in ("alias", "folder"):
        assert staged[student].notebook is None
        assert "link" in ev.load(tmp_path / "state", A, student)["flags"]


def test_a_fifo_does_not_block(tmp_path):
    folder = folder_with(tmp_path, {})
    os.mkfifo(folder / f"{A}.ipynb")
    q = Quiet()
    assert staging.stage_one(folder, tmp_path / "out", A, {A: template()}, q) is None
    assert "link" in q.flags


def test_size_and_depth_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "MAX_NOTEBOOK_BYTES", 50_000)
    big = notebook()
    big["metadata"]["pad"] = "x" * 60_000
    q = Quiet()
    folder = folder_with(tmp_path / "a", {f"{A}.ipynb": dump(big)})
    assert staging.stage_one(folder, tmp_path / "o1", A, {A: template()}, q) is None
    assert "too-large" in q.flags
    monkeypatch.undo()
    for i, raw in enumerate([b"[" * 100_000 + b"]" * 100_000, dump(nested(120))]):
        q = Quiet()
        folder = folder_with(tmp_path / f"d{i}", {f"{A}.ipynb": raw})
        assert (
            staging.stage_one(folder, tmp_path / f"o{i}", A, {A: template()}, q) is None
        )
        assert "nested" in " ".join(q.flags["malformed"])


def test_many_and_deep_files_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "MAX_ENTRIES", 50)
    folder = folder_with(tmp_path, {f"{A}.ipynb": dump(notebook())})
    deep = folder
    for i in range(staging.MAX_TREE_DEPTH + 3):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    for i in range(100):
        (folder / f"f{i:03}.txt").write_text("x")
    q = Quiet()
    assert staging.stage_one(folder, tmp_path / "out", A, {A: template()}, q)
    note = " ".join(q.flags["extra-files"])
    assert "more than 50 files" in note


def test_outputs_and_attachments_are_not_staged(tmp_path):
    nb = prefilled()
    nb["cells"].append(
        {
            "cell_type": "markdown",
            "metadata": {},
            "id": "m1",
            "source": "![x](attachment:x.png)",
            "attachments": {"x.png": {"image/png": "AAAA"}},
        }
    )
    folder = folder_with(tmp_path, {f"{A}.ipynb": dump(nb)})
    path = staging.stage_one(folder, tmp_path / "out", A, {A: template()}, Quiet())
    staged = json.loads(path.read_text())
    for cell in staged["cells"]:
        assert not cell.get("outputs") and not cell.get("attachments")
        assert cell.get("execution_count") is None
    assert "prefilled" not in path.read_text()


def test_shown_escapes_names():
    assert staging.shown("a\nb") == "a\\nb"
    assert staging.shown("\udcff") == "\\udcff"
    assert staging.shown("x" * 100).endswith("...")
    assert staging.shown(("d", "e`|f")) == "d/e\\x60\\x7cf"


# --------------------------------------------------------------- provenance
SETUP = [
    (
        "setup",
        "import attncourse\nimport keras\nimport tensorflow as tf\n"
        "import torch\nfrom torch import nn\n",
    )
]


@pytest.mark.parametrize(
    "code, expected",
    [
        (
            "import torch.nn.functional as F\nF.scaled_dot_product_attention(q, k, v)",
            "torch.nn.functional.scaled_dot_product_attention",
        ),
        ("class M(nn.MultiheadAttention):\n    pass", "torch.nn.MultiheadAttention"),
        (
            "layer = tf.keras.layers.MultiHeadAttention(2, 4)",
            "keras.layers.MultiHeadAttention",
        ),
        (
            "ops = keras.ops\nops.dot_product_attention(q, k, v)",
            "keras.ops.dot_product_attention",
        ),
        (
            "g = getattr(torch.nn.functional, 'scaled_dot_product_attention')",
            "torch.nn.functional.scaled_dot_product_attention",
        ),
        (
            "from attncourse.torch import *\nsoft_attention(s, v)",
            "attncourse.torch.soft_attention",
        ),
        (
            "from attncourse import numpy as anp\nanp.key_value_attention(q, k, v, f)",
            "attncourse.numpy.key_value_attention",
        ),
        (
            "%time out = attncourse.torch.soft_attention(s, v)",
            "attncourse.torch.soft_attention",
        ),
    ],
)
def test_library_calls_are_named(code, expected):
    found = provenance.scan(
        [("torch-solution", code)],
        __import__("grader.assignments.addressing", fromlist=["FORBIDDEN"]).FORBIDDEN,
        SETUP,
    )
    assert any(expected in c for c in found.calls), found


@pytest.mark.parametrize(
    "code, expected",
    [
        ("import importlib\nimportlib.import_module('torch')", "importlib"),
        ("__import__('torch')", "__import__"),
        ("exec('x = 1')", "exec"),
        ("eval('1')", "eval"),
        ("name = 'x'\ngetattr(torch.nn.functional, name)", "<computed name>"),
        ("vars(torch.nn.functional)['x']", "vars"),
        ("torch.nn.functional.__dict__['x']", "__dict__"),
        ("x = torch" + ".nn" * 200 + ".Linear", "attribute chain"),
    ],
)
def test_dynamic_access_is_flagged(code, expected):
    found = provenance.scan(
        [("tf-solution", code)], provenance.BUILTIN_ATTENTION, SETUP
    )
    assert any(expected in d for d in found.dynamic), found


@pytest.mark.parametrize(
    "assignment",
    [
        "addressing",
        "scoring-functions",
        "soft-hard-attention",
        "key-value-masking",
        "self-attention",
        "cross-attention-seq2seq",
        "multi-head-attention",
        "builtin-layers",
        "transformer-block",
        "tiny-transformer",
        "positions",
        "kv-cache",
        "attention-cost",
        "flash-attention",
        "sparse-linear-attention",
    ],
)
def test_honest_solutions_are_not_flagged(assignment):
    """The reference solution and the catalogued mistakes use none of it; in
    builtin-layers the built-in layers are the task."""
    release = release_notebook(assignment)
    for student in ("reference", "bug1", "bug2", "bug3"):
        nb = nbformat.from_dict(
            nbs.submission(release, student_solutions(assignment, student))
        )
        q = Quiet()
        staged, _ = staging.rebuild(nb, nbformat.from_dict(release), q)
        staging.check_provenance(staged, nbformat.from_dict(release), assignment, q)
        assert not {"library-call", "dynamic-code"} & set(q.flags), (student, q.flags)


def test_builtin_layers_still_flags_the_course_implementation():
    release = release_notebook("builtin-layers")
    sol = student_solutions("builtin-layers", "reference")
    sol["tf-solution"] += "\nx = atf.to_keras_mask(None)\n"
    nb = nbformat.from_dict(nbs.submission(release, sol))
    q = Quiet()
    staged, _ = staging.rebuild(nb, nbformat.from_dict(release), q)
    staging.check_provenance(staged, nbformat.from_dict(release), "builtin-layers", q)
    assert "attncourse.tf.to_keras_mask" in " ".join(q.flags["library-call"])


# ----------------------------------------------------------------- manifest
def staged_copy(tmp_path, student="s"):
    state = tmp_path / "state"
    path = state / "staged" / student / A / f"{A}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_bytes(dump(notebook()))
    item = staging.Staged(student, A, notebook=path, run="run-1")
    staging.write_manifest(state, "run-1", [item])
    return state, path


def test_the_manifest_vouches_for_the_staged_copy_only(tmp_path):
    state, path = staged_copy(tmp_path)
    folder = path.parent
    assert entry.check(state, folder, "s", A, A, "run-1") is None
    assert "not set" in entry.check(state, folder, "s", A, A, None)
    assert "another grading run" in entry.check(state, folder, "s", A, A, "run-2")
    assert "did not stage" in entry.check(state, folder, "t", A, A, "run-1")
    submitted = tmp_path / "submitted" / "s" / A
    submitted.mkdir(parents=True)
    shutil.copy(path, submitted)
    assert "not from the grader's staged" in entry.check(
        state, submitted, "s", A, A, "run-1"
    )
    path.write_bytes(path.read_bytes().replace(b"beta", b"BETA", 1))
    assert "changed or forged" in entry.check(state, folder, "s", A, A, "run-1")


def test_a_manifest_without_the_secret_is_refused(tmp_path):
    state, path = staged_copy(tmp_path)
    manifest = json.loads((state / staging.MANIFEST).read_text())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    key = staging.manifest_key("s", A, A)
    manifest["notebooks"][key] = hmac.new(
        b"not the secret",
        json.dumps([staging.PURPOSE, "run-1", "s", A, A, digest]).encode(),
        hashlib.sha256,
    ).hexdigest()
    (state / staging.MANIFEST).write_text(json.dumps(manifest))
    assert "changed or forged" in entry.check(state, path.parent, "s", A, A, "run-1")
