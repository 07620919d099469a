"""What hidden tests call: ``check(assignment, check_name, framework)``.

It is two steps, kept apart so a later version can run the verdict outside
the student's kernel (sandboxed grading):

* ``observe`` -- runs the student's code (looked up by name in the notebook's
  namespace) on the reference inputs and returns plain NumPy results;
* ``judge`` -- compares observations with the reference outputs and raises a
  GradingError that names the likely mistake (NumPy only, no student code).
"""

import sys

from . import reference as _reference
from . import tasks
from .adapters import FRAMEWORKS
from .core import verdict
from .errors import GradingError, internal_error


def _check_def(assignment: str, check_name: str, framework: str):
    module = tasks.get(assignment)
    if check_name not in module.CHECKS:
        raise KeyError(f"{assignment} has no check {check_name!r}; "
                       f"known: {list(module.CHECKS)}")
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    return module.CHECKS[check_name]


def _needs_gradients(check) -> bool:
    return any(k.startswith("grad_") for k in check.compare)


def observe(assignment: str, check_name: str, framework: str, namespace: dict,
            reference=None, case: str | None = None) -> dict:
    """{case: results} of the student's code on the reference inputs."""
    check_def = _check_def(assignment, check_name, framework)
    ref = reference if isinstance(reference, _reference.ReferenceData) else \
        _reference.load(assignment, reference)
    cases = check_def.cases if case is None else (case,)
    return {c: check_def.run(framework, namespace, ref.inputs(c),
                             gradients=_needs_gradients(check_def)) for c in cases}


def judge(assignment: str, check_name: str, framework: str, observations: dict,
          reference=None) -> None:
    """Raise GradingError unless every observed case matches the reference."""
    check_def = _check_def(assignment, check_name, framework)
    ref = reference if isinstance(reference, _reference.ReferenceData) else \
        _reference.load(assignment, reference)
    for case in check_def.cases:
        verdict(check_def, framework, case, ref.inputs(case), ref.expected(case),
                observations[case])


def check(assignment: str, check_name: str, framework: str, namespace=None,
          reference=None) -> None:
    """Hidden test: run the student's code on the reference data and judge it.

    ``namespace`` defaults to the caller's globals (the notebook). Cases are
    judged one by one, so the first wrong case is the one reported. Returns
    None (a number as a test cell's last value would mean partial credit).
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    try:
        ref = reference if isinstance(reference, _reference.ReferenceData) else \
            _reference.load(assignment, reference)
        check_def = _check_def(assignment, check_name, framework)
        for case in check_def.cases:
            observed = observe(assignment, check_name, framework, namespace, ref, case)
            verdict(check_def, framework, case, ref.inputs(case), ref.expected(case),
                    observed[case])
    except GradingError as exc:
        raise GradingError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001  (a grader bug must not leak data)
        raise internal_error(exc) from None
