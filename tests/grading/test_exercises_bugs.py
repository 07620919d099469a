"""Typical wrong implementations of the exercises, and what grading must say.

Each Bug edits the reference solution of one framework part (TensorFlow or
PyTorch) with one typical mistake; ``lost`` lists the test cells (grade ids)
that must score 0 and ``tag`` the likely mistake the feedback must name. A
student notebook combines one TensorFlow bug and one PyTorch bug, so each
part is graded separately and its points are lost independently.

Here every bug runs in this process (fast, no nbgrader); test_exercises_grading
runs the same notebooks through the real nbgrader CLI.
"""

import pytest
from support.grading import (
    BUGS,
    STUDENTS,
    WARNING_EDITS,
    expected_lost,
    run_in_process,
    student_solutions,
)

import attncourse  # noqa: F401  (quiet TF first)

# A correct solution that makes the frameworks warn in graded cells: a PyTorch
# UserWarning (stderr) and a TensorFlow deprecation message (logged to stdout
# in a kernel). It must still get full marks (nbgrader's IgnorePattern, see
# grader.noise).


@pytest.mark.parametrize("assignment", sorted({b.assignment for b in BUGS}))
@pytest.mark.parametrize("student", STUDENTS)
def test_bug_loses_exactly_its_cells_with_its_hint(assignment, student):
    results = run_in_process(assignment, student_solutions(assignment, student))
    failed = {gid for gid, err in results.items() if err}
    assert failed == expected_lost(assignment, student), results
    for bug in BUGS:
        if bug.assignment == assignment and bug.student == student and bug.tag:
            messages = [results[g] for g in bug.lost if "hidden" in g]
            assert any(f"({bug.tag})" in m for m in messages), messages


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
@pytest.mark.parametrize("assignment", sorted(WARNING_EDITS))
def test_warning_solution_is_correct_in_process(assignment):
    results = run_in_process(assignment, student_solutions(assignment, "warning"))
    assert not any(results.values()), results
