"""The exercises through the real nbgrader CLI, end to end.

A temporary copy of the course is graded once per test session
(``support.course_batch``) with the documented batch command,
``python -m grader grade --workers 2`` (nbgrader
generate_assignment, autograde on an embedded Dask cluster of two workers --
one per CPU core, one task per submission --, generate_feedback, export):
every submission must be graded exactly once.
Every assignment gets submissions built from the committed release: the
reference solution, the unmodified release, two students with one typical
TensorFlow bug and one typical PyTorch bug each (test_exercises_bugs.BUGS:
students bug1 and bug2 carry the six mistakes the feedback must name --
missing 1/sqrt(d_k), softmax over the wrong axis, inverted mask, transposed
weights, forgotten output projection, wrong head split -- and more; bug3 a third),
and, for key-value-masking, a correct solution that writes framework
warnings to stderr; other modules' students of one assignment are graded in
the same run (``BATCH_STUDENTS``). The repository is not touched.
"""

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.grading import (
    BUGS,
    ROOT,
    STUDENTS,
    WARNING_EDITS,
    environment,
    expected_lost,
    points,
    read_scores,
)

from grader import leaks
from grader import notebooks as nbs
from grader.assignments import ASSIGNMENTS

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

# the session's whole-course run (support.course_batch) grades every assignment
# once; other modules add their own students of one assignment to it
BATCH_ASSIGNMENTS = tuple(ASSIGNMENTS)
WORKERS = 2  # support.course_batch.WORKERS
# STUDENTS (support.grading): every catalogue student make_course submits,
# bug1..bug3; the run grades them all, so all are asserted (the separate
# end-to-end run of sparse-linear-attention graded the same notebooks again)
NAMED = {
    "missing-scale",
    "softmax-axis",
    "inverted-mask",
    "transposed-weights",
    "missing-output-projection",
    "head-split-without-transpose",
}


@pytest.fixture(scope="module")
def graded(course_batch):
    return course_batch


def log_tail(root: Path) -> str:
    return (root / "grade_all.log").read_text()[-4000:]


def test_batch_grading_command_succeeds(graded):
    for root, code in graded["codes"].items():
        assert code == 0, log_tail(root)
        rows = list(csv.DictReader(open(root / "grades.csv")))
        graded_pairs = [(r["assignment"], r["student_id"]) for r in rows]
        submitted = {
            (p.parent.name, p.parent.parent.name)
            for p in (root / "submitted").glob("*/*/*.ipynb")
        }
        # every submission graded, once: nothing lost, nothing counted twice
        # (the export has a row per student and assignment, submitted or not)
        assert len(graded_pairs) == len(set(graded_pairs))
        assert submitted <= set(graded_pairs)
        assert set(graded["scores"]) == submitted


def test_grading_ran_on_the_embedded_cluster_once_per_submission(graded):
    for root in graded["roots"]:
        report = json.loads((root / "grading-report.json").read_text())
        cluster = report["cluster"]
        assert cluster["embedded"] and len(cluster["workers"]) == WORKERS
        assert report["workers"] == WORKERS and not cluster["refused"]
        log = (root / "grade_all.log").read_text()
        done = re.findall(r"^\[\d+/\d+\] (\S+)/(\S+): graded on (\S+) in", log, re.M)
        pairs = [(a, s) for s, a, _ in done]
        # one task per submission, each graded once, by any of the workers
        assert len(pairs) == len(set(pairs))
        assert {
            k for k in graded["scores"] if (root / "submitted" / k[1] / k[0]).is_dir()
        } <= set(pairs)
        assert {w for _, _, w in done} == set(cluster["workers"])
        assert 0 < cluster["peak_rss_mib"] < 1024  # the workers, not the kernels
        # the report records where the time went
        assert report["steps"]["autograde"] > 0
        for row in report["rows"]:
            t = row["timings"]
            assert t["kernel_start"] > 0 and t["cells"] > 0
            assert t["notebook"] >= t["kernel_start"] + t["cells"]


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_reference_solution_scores_full_marks(graded, assignment):
    expected = points(assignment)
    assert graded["scores"][assignment, "reference"] == pytest.approx(expected)


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_unmodified_release_scores_zero_without_crashing(graded, assignment):
    scores = graded["scores"][assignment, "blank"]
    assert set(scores) == set(points(assignment)) and not any(scores.values())
    text = graded["feedback"][assignment, "blank"]
    assert "GradingError" in text and "is not implemented yet" in text


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
@pytest.mark.parametrize("student", STUDENTS)
def test_bug_loses_exactly_its_points_and_feedback_names_it(
    graded, assignment, student
):
    scores = graded["scores"][assignment, student]
    full = points(assignment)
    lost = expected_lost(assignment, student)
    assert {g for g, s in scores.items() if s == 0} == lost
    assert all(scores[g] == full[g] for g in full if g not in lost)
    text = graded["feedback"][assignment, student]
    for bug in BUGS:
        if bug.assignment == assignment and bug.student == student and bug.tag:
            assert f"Likely mistake ({bug.tag})" in text, (bug.part, bug.tag)


def test_the_named_mistakes_are_graded_end_to_end():
    assert {b.tag for b in BUGS if b.student in STUDENTS} >= NAMED


def test_correct_solution_with_stderr_warnings_keeps_full_marks(graded):
    for assignment in WARNING_EDITS:
        scores = graded["scores"][assignment, "warning"]
        assert scores == pytest.approx(points(assignment))


def test_fresh_release_matches_the_committed_one(graded):
    for root in graded["roots"]:
        for nb_path in sorted((root / "exercises").glob("*/*.ipynb")):
            committed = ROOT / "exercises" / nb_path.parent.name / nb_path.name
            assert nbs.comparable(nbs.read(nb_path)) == nbs.comparable(
                nbs.read(committed)
            ), f"{committed} is stale: run python -m grader release"


def test_hidden_data_reaches_autograde_but_not_students(graded):
    for root in graded["roots"]:
        assert list((root / "autograded").glob("*/*/hidden/reference.npz"))
        assert leaks.scan_release(root) == []
        assert leaks.scan_feedback(root) == []
        assert (
            leaks.scan_feedback(root, students=["blank"], check_solution_code=True)
            == []
        )
        assert not list((root / "feedback").rglob("*.npz"))
    for text in graded["feedback"].values():
        assert "BEGIN HIDDEN TESTS" not in text
        assert "grader import" not in text


def test_without_ignore_pattern_the_warnings_would_cost_points(graded):
    """Proof that the warnings really reach stderr in graded cells: regrade the
    warning student with IgnorePattern disabled (runs last: it rewrites that
    student's grades)."""
    root = graded["roots"][-1]
    assignment = next(iter(WARNING_EDITS))
    assert (root / "solutions" / assignment).exists()
    # plain autograde accepts only this run's staged copies (grader.entry)
    state = root / ".grading"
    run = json.loads((state / "staged-manifest.json").read_text())["run"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nbgrader",
            "autograde",
            assignment,
            "--student=warning",
            "--force",
            "--IgnorePattern.enabled=False",
            f"--CourseDirectory.submitted_directory={state / 'staged'}",
        ],
        cwd=root,
        env={**environment(root), "GRADER_STAGING_RUN": run},
        check=True,
        capture_output=True,
        timeout=600,
    )
    scores = read_scores(root)[assignment, "warning"]
    # PyTorch's UserWarning goes to stderr in the visible and two hidden cells
    assert scores["torch-visible"] == 0 and scores["torch-hidden-attention"] == 0
    # TensorFlow's deprecation message is logged to stdout in a kernel: harmless
    assert scores["tf-visible"] == 1
