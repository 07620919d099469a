"""Judging in the grader process: observations against the expected outputs.

``judge`` compares what a kernel recorded with the float64 reference and
raises a ``GradingError`` that names the likely mistake (NumPy only, no
student code). ``check_here`` observes *and* judges in one process -- for tests
and for a notebook run by hand beside the grader's files, never in a sandbox
(the reference is not there).
"""

from grader import assignments
from grader import reference as _reference
from grader.checks import verdict
from grader.kernel.errors import GradingError, internal_error
from grader.kernel.recorder import observe, run_def


def check_def(assignment: str, check_name: str, framework: str):
    """The grader-side Check (validates the ids like the kernel does)."""
    run_def(assignment, check_name, framework)
    return assignments.get(assignment).CHECKS[check_name]


def _data(assignment, reference):
    if isinstance(reference, _reference.ReferenceData):
        return reference
    return _reference.load(assignment, reference)


def judge(
    assignment: str, check_name: str, framework: str, observations: dict, reference=None
) -> None:
    """Raise GradingError unless every observed case matches the reference."""
    check = check_def(assignment, check_name, framework)
    ref = _data(assignment, reference)
    for case in check.cases:
        verdict(
            check,
            framework,
            case,
            ref.inputs(case),
            ref.expected(case),
            observations[case],
        )


def check_here(
    assignment: str, check_name: str, framework: str, namespace: dict, reference=None
) -> None:
    """Observe and judge case by case (the first wrong case is reported)."""
    try:
        ref = _data(assignment, reference)
        check = check_def(assignment, check_name, framework)
        for case in check.cases:
            observed = observe(assignment, check_name, framework, namespace, ref, case)
            verdict(
                check,
                framework,
                case,
                ref.inputs(case),
                ref.expected(case),
                observed[case],
            )
    except GradingError as exc:
        raise GradingError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001  (a grader bug must not leak data)
        raise internal_error(exc) from None
