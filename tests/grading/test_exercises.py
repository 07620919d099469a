"""The nbgrader exercises without running nbgrader (fast).

Structure of the source notebooks, the committed release (no leaks), the hidden
reference data (reproducible, agrees with the library, every known mistake
distinguishable), the grader's verdicts and messages, the stderr-noise policy
and the nbgrader configuration. test_exercises_bugs runs submissions in this
process; test_exercises_grading runs the real nbgrader CLI end to end.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from support.grading import ROOT, run_in_process, student_solutions

import attncourse  # noqa: F401  (quiet TF first)
from grader import assignments as tasks
from grader import leaks, reference
from grader import notebooks as nbs
from grader.assignments import ASSIGNMENTS
from grader.build_references import build, differences
from grader.checks import verdict
from grader.hooks import hidden_dirs, strip_hidden
from grader.kernel.errors import GradingError, call_student
from grader.noise import STDERR_NOISE, is_noise

CHECK_CALL = re.compile(r'check\("([\w-]+)", "(\w+)", "(tf|torch)"\)')


def meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def test_every_assignment_has_a_source_a_release_and_reference_data():
    sources = {p.parent.name for p in (ROOT / "solutions").glob("*/*.ipynb")}
    releases = {p.parent.name for p in (ROOT / "exercises").glob("*/*.ipynb")}
    assert sources == set(ASSIGNMENTS) == releases
    for a in ASSIGNMENTS:
        assert reference.source_path(ROOT, a).is_file()
        assert not list((ROOT / "exercises" / a).glob("*/")), "only the notebook"


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_source_notebook_structure(assignment):
    nb = nbs.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb")
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = nbs.source(code[0]).lstrip().splitlines()[0]
    assert first.startswith("import attncourse"), "import attncourse first (quiets TF)"
    ids = [meta(c)["grade_id"] for c in nb["cells"] if meta(c)]
    assert len(ids) == len(set(ids))
    for c in code:
        assert not c.get("outputs") and c.get("execution_count") is None
    module = tasks.get(assignment)
    calls = set()
    part_points = {part: {"visible": 0, "hidden": 0} for part in ("tf", "torch")}
    for c in nb["cells"]:
        m, text = meta(c), nbs.source(c)
        if "BEGIN HIDDEN TESTS" in text:
            assert m.get("grade") and m.get("locked"), "hidden tests in a grade cell"
        if "BEGIN SOLUTION" in text:
            assert m.get("solution") and not m.get("grade")
        if m.get("grade"):
            part = m["grade_id"].split("-")[0]
            kind = "hidden" if "BEGIN HIDDEN TESTS" in text else "visible"
            part_points[part][kind] += m["points"]
            for a, check, fw in CHECK_CALL.findall(text):
                assert a == assignment and fw == part
                calls.add((check, fw))
    assert calls == {(c, fw) for c in module.CHECKS for fw in ("tf", "torch")}
    for part, p in part_points.items():
        assert p["visible"] >= 1 and p["hidden"] > p["visible"], (part, p)


def test_committed_release_has_no_leaks():
    assert leaks.scan_release(ROOT) == []


def test_committed_release_is_a_release_of_the_sources():
    """Same cells as the source, with solutions and hidden tests removed
    (test_exercises_grading also compares with a fresh nbgrader generation)."""
    for a in ASSIGNMENTS:
        src = nbs.read(ROOT / "solutions" / a / f"{a}.ipynb")
        rel = nbs.read(ROOT / "exercises" / a / f"{a}.ipynb")
        assert [nbs.grade_id(c) for c in src["cells"]] == [
            nbs.grade_id(c) for c in rel["cells"]
        ]
        for c in rel["cells"]:
            assert not c.get("outputs") and c.get("execution_count") is None
            if meta(c).get("solution"):
                assert "raise NotImplementedError()" in nbs.source(c)


# the long memory cases of attention-cost, flash-attention and
# sparse-linear-attention take 30-100 s in process: the slow tier; the others
# take well under a second each
SLOW_REFERENCES = {"attention-cost", "flash-attention", "sparse-linear-attention"}


@pytest.mark.parametrize(
    "assignment",
    [
        pytest.param(a, marks=pytest.mark.slow) if a in SLOW_REFERENCES else a
        for a in ASSIGNMENTS
    ],
)
def test_reference_data_reproduces_and_agrees_with_the_library(assignment):
    arrays = build(assignment, crosscheck=True)  # also: variants are distinguishable
    stored = reference.load_file(reference.source_path(ROOT, assignment)).arrays
    assert differences(stored, arrays, tol=1e-6) == []


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_every_known_mistake_is_named_without_reference_values(assignment):
    """Feed each variant's own output to the verdict: it must name that mistake
    (or one that predicts the same numbers) and print no reference value."""
    module = tasks.get(assignment)
    ref = reference.load_file(reference.source_path(ROOT, assignment))
    ref_values = leaks.reference_numbers(ref)
    for check in module.CHECKS.values():
        for variant in check.variants:
            for case in check.cases:
                if variant.cases is not None and case not in variant.cases:
                    continue
                inputs, expected = ref.inputs(case), ref.expected(case)
                predicted = variant.compute(inputs)
                if not set(predicted) & set(check.compare):
                    continue  # e.g. a forward mistake, seen here through gradients
                observed = {**expected, **predicted}
                with pytest.raises(GradingError) as err:
                    verdict(check, "tf", case, inputs, expected, observed)
                message = str(err.value)
                tags = re.findall(r"Likely mistake \(([\w-]+)\)", message)
                assert tags, message
                named = next(v for v in check.variants if v.tag == tags[0])
                same = named.compute(inputs)
                assert all(
                    np.allclose(same[k], observed[k]) for k in same if k in predicted
                ), (variant.tag, message)
                assert leaks.scan_text(message, {}, ref_values, "message") == []


@pytest.mark.slow
def test_reference_solutions_pass_every_check_in_process():
    for a in ASSIGNMENTS:
        results = run_in_process(a, student_solutions(a, "reference"))
        assert not any(results.values()), (a, results)


def test_unmodified_release_fails_every_test_cleanly():
    for a in ASSIGNMENTS:
        rel = nbs.read(ROOT / "exercises" / a / f"{a}.ipynb")
        solutions = {
            nbs.grade_id(c): nbs.source(c)
            for c in rel["cells"]
            if meta(c).get("solution")
        }
        results = run_in_process(a, solutions)
        assert all(results.values()), (a, results)
        hidden = [e for g, e in results.items() if "hidden" in g]
        assert all(e.startswith("GradingError") for e in hidden), hidden


def test_grading_error_shows_the_message_only():
    err = GradingError("what is wrong\nLikely mistake (x): why")
    lines = err._render_traceback_()
    assert "what is wrong" in lines[0] and lines[1] == "Likely mistake (x): why"

    def student_code():
        raise ValueError(f"shapes (2, 3) and (4,) {1 / 8.1:.9f}")

    with pytest.raises(GradingError) as info:
        call_student("f(x)", student_code)
    text = str(info.value)
    assert "f(x) raised ValueError" in text and "student_code" in text
    assert f"{1 / 8.1:.9f}" not in text  # long decimals are redacted
    assert "grader/" not in text  # no grader frames


def test_missing_reference_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(reference.ENV_VAR, raising=False)
    with pytest.raises(GradingError, match="reference data not found"):
        reference.load("addressing")


NOISE = [
    "/tmp/ipykernel_1/123.py:3: UserWarning: To copy construct from a tensor ...\n"
    "  key_mask = torch.tensor(key_mask)\n",
    "WARNING:tensorflow:From /x/dispatch.py:1264: to_float (from tensorflow) is "
    "deprecated and will be removed in a future version.\nInstructions for "
    "updating:\nUse `tf.cast` instead.\n",
    "WARNING: All log messages before absl::InitializeLog() is called are written "
    "to STDERR\nI0000 00:00:1795989603.646532   17897 port.cc:153] oneDNN custom "
    "operations are on.\n",
    "2026-01-01 12:00:00.123456: W tensorflow/core/framework/op.cc:12] something\n",
    "[W1129 22:00:00.000000000 NNPACK.cpp:61] Could not initialize NNPACK!\n",
    "/x/keras/src/layers/layer.py:431: UserWarning: `build()` was called on layer\n",
    "/x/numpy/core/_methods.py:1: RuntimeWarning: divide by zero encountered\n",
]
NOT_NOISE = [
    "hello from the student\n",
    "Traceback (most recent call last):\n",
    "AssertionError: weights must sum to 1\n",
    "error: 3 != 4\n",
]


def test_stderr_noise_pattern():
    assert all(is_noise(t) for t in NOISE)
    assert not any(is_noise(t) for t in NOT_NOISE)


def load_config():
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


def test_ignore_pattern_keeps_points_for_framework_noise_only():
    """nbgrader 0.9.6's IgnorePattern is disabled by default; our config enables
    it, and a graded cell with framework warnings on stderr keeps its points."""
    import nbformat
    from nbgrader.preprocessors import IgnorePattern
    from nbgrader.utils import determine_grade

    pp = IgnorePattern(config=load_config())
    assert pp.enabled and pp.pattern == STDERR_NOISE

    def graded_cell(*texts):
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["nbgrader"] = {
            "grade": True,
            "grade_id": "t",
            "points": 2,
            "solution": False,
            "locked": True,
            "schema_version": 3,
        }
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stderr", text=t) for t in texts
        ]
        return cell

    nb = nbformat.v4.new_notebook(
        cells=[graded_cell(*NOISE), graded_cell(NOT_NOISE[0])]
    )
    assert determine_grade(nb.cells[0])[0] == 0  # what nbgrader does without it
    nb, _ = pp(nb, {})
    assert determine_grade(nb.cells[0])[0] == 2
    assert determine_grade(nb.cells[1])[0] == 0  # a student's own stderr still counts


def test_nbgrader_config():
    cfg = load_config()
    cd = cfg.CourseDirectory
    assert cd.course_id == "attention-course"
    assert (cd.source_directory, cd.release_directory) == ("solutions", "exercises")
    assert Path(cd.root) == ROOT and cd.db_url == f"sqlite:///{ROOT / 'gradebook.db'}"
    names = [p.__name__ for p in cfg.GenerateFeedback.preprocessors]
    assert "ClearHiddenTests" in names and "GetGrades" in names
    assert callable(cfg.GenerateAssignment.post_convert_hook)
    assert callable(cfg.GenerateFeedback.post_convert_hook)


def test_hooks_remove_hidden_data(tmp_path):
    (tmp_path / "a" / "hidden").mkdir(parents=True)
    (tmp_path / "a" / "hidden" / "reference.npz").write_bytes(b"x")
    (tmp_path / "a" / "a.ipynb").write_text("{}")
    hook = strip_hidden(tmp_path)
    hook(assignment="a", student=".", notebooks=[])
    assert hidden_dirs(tmp_path) == [] and (tmp_path / "a" / "a.ipynb").exists()


def test_gitignore_keeps_grading_state_out():
    ignored = (ROOT / ".gitignore").read_text().split()
    for name in (
        "gradebook.db",
        "gradebook.db.lock",
        "submitted/",
        "autograded/",
        "feedback/",
        ".grading/",
    ):
        assert name in ignored


def test_exercises_page_links_every_release():
    page = (ROOT / "book" / "exercises.md").read_text()
    for a in ASSIGNMENTS:
        assert f"<../exercises/{a}/{a}.ipynb>" in page


def test_observe_and_judge_work_apart():
    """The verdict needs only NumPy observations, so it can later run outside
    the student's kernel (sandboxed grading)."""
    from grader.judging import judge
    from grader.kernel.recorder import observe

    a = "addressing"
    src = nbs.read(ROOT / "solutions" / a / f"{a}.ipynb")
    namespace = {"__name__": "__main__"}
    for cell in src["cells"]:
        if cell["cell_type"] == "code" and meta(cell) and not meta(cell).get("grade"):
            exec(
                nbs.solution_cells(src).get(meta(cell)["grade_id"], nbs.source(cell)),
                namespace,
            )
    ref = reference.load_file(reference.source_path(ROOT, a))
    observations = observe(a, "soft_lookup", "torch", namespace, ref)
    for results in observations.values():
        assert all(isinstance(v, np.ndarray) for v in results.values())
    judge(a, "soft_lookup", "torch", observations, ref)
    observations["main"]["outputs"] = observations["main"]["outputs"] * 1.1
    with pytest.raises(GradingError, match="mismatch in outputs against the reference"):
        judge(a, "soft_lookup", "torch", observations, ref)
