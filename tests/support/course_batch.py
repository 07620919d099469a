"""One whole-course grading run per test session (a pytest plugin).

The documented batch command (``python -m grader grade --workers 2``: nbgrader
generate_assignment, autograde on an embedded Dask cluster of two workers,
generate_feedback, export) grades one temporary course copy once, and every
module that needs a real grading run of an assignment asserts on its own rows
of it instead of grading that assignment again.

A test module takes part by naming, at module level,

* ``BATCH_ASSIGNMENTS``: the assignments it needs graded; each gets the
  catalogue's students (``support.grading.make_course``: reference, blank,
  bug1..bug3, warning where one exists);
* ``BATCH_STUDENTS`` (optional): more students of those assignments,
  ``{(assignment, student): {grade_id: solution source}}``, built from the
  committed release like the others;

and by using the session fixture ``course_batch``. Only the modules among the
selected tests count, so ``pytest -k attention-cost`` grades that assignment
alone, and the whole suite grades every assignment once.
"""

from __future__ import annotations

import time

import pytest

from grader import leaks
from grader import notebooks as nbs
from grader.assignments import ASSIGNMENTS

from . import run_grader
from .grading import make_course, read_scores, release_notebook

WORKERS = 2
TIMEOUT = 1800  # seconds for the whole batch


def selected(session) -> tuple[list[str], dict]:
    """The assignments and extra students the selected tests' modules ask for."""
    wanted, extra = set(), {}
    modules = {getattr(item, "module", None) for item in session.items}
    for module in sorted(modules - {None}, key=lambda m: m.__name__):
        wanted |= set(getattr(module, "BATCH_ASSIGNMENTS", ()))
        extra.update(getattr(module, "BATCH_STUDENTS", {}))
    unknown = wanted - set(ASSIGNMENTS)
    assert not unknown, f"BATCH_ASSIGNMENTS names no assignment: {sorted(unknown)}"
    assert {a for a, _ in extra} <= wanted, (
        "BATCH_STUDENTS of an assignment not asked for"
    )
    return [a for a in ASSIGNMENTS if a in wanted], extra


@pytest.fixture(scope="session")
def course_batch(request, tmp_path_factory) -> dict:
    assignments, extra = selected(request.session)
    assert assignments, "the module using course_batch sets BATCH_ASSIGNMENTS"
    root = tmp_path_factory.mktemp("courses") / "course"
    make_course(root, assignments)
    for (assignment, student), solutions in sorted(extra.items()):
        folder = root / "submitted" / student / assignment
        assert not folder.exists(), f"student {student} of {assignment} twice"
        nb = nbs.submission(release_notebook(assignment), solutions)
        nbs.write(nb, folder / f"{assignment}.ipynb")
    start = time.monotonic()
    run = run_grader.start(root, "--workers", str(WORKERS), timeout=TIMEOUT).wait()
    elapsed = time.monotonic() - start
    print(f"\nbatch grading of {len(assignments)} assignments: {elapsed:.0f} s")
    feedback = {}
    for page in (root / "feedback").glob("*/*/*.html"):
        feedback[page.parent.name, page.parent.parent.name] = leaks.html_text(page)
    return {
        "root": root,
        "roots": [root],
        "run": run,
        "codes": {root: run.code},
        "assignments": assignments,
        "scores": read_scores(root),
        "feedback": feedback,
        "rows": run.pairs,  # (assignment, student) -> the report's row
        "elapsed": elapsed,
    }
