"""What hidden tests call: ``check(assignment, check_name, framework)``.

It is two steps, kept apart so the verdict can run outside the student's
kernel:

* ``observe`` -- runs the student's code (looked up by name in the notebook's
  namespace) on the reference inputs and returns plain NumPy results;
* ``judge`` -- compares observations with the reference outputs and raises a
  GradingError that names the likely mistake (NumPy only, no student code).

Two modes:

* sandboxed grading (``attncourse.grading.grade_all``; the kernel's environment
  has ``ATTNCOURSE_GRADING_MODE=observe``): ``check`` only *records* --
  observes on the inputs in ``$ATTNCOURSE_INPUTS`` (inputs only, drawn for this
  grading run) and publishes the results as a display output of the hidden
  test cell (``attncourse.grading.observations``). It never raises for a wrong
  or failing student function: the grader judges the recorded results outside
  the kernel (``attncourse.grading.verdicts``) and writes the verdict into the
  cell. Nothing in the kernel can change the verdict;
* otherwise (plain ``nbgrader autograde`` without our configuration, tests,
  notebooks run by hand): observe and judge both here, on the reference file
  (``attncourse.grading.reference.load``).
"""

import json
import os
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


MODE_ENV = "ATTNCOURSE_GRADING_MODE"
INPUTS_ENV = "ATTNCOURSE_INPUTS"


def observing() -> bool:
    """True in a sandboxed grading kernel: hidden tests record, the grader judges."""
    return os.environ.get(MODE_ENV) == "observe"


def _publish(mime: str, payload: str) -> None:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("recording observations needs an IPython kernel")
    shell.display_pub.publish(data={mime: payload}, metadata={})


def record(assignment: str, check_name: str, framework: str, namespace: dict) -> dict:
    """Observe every case on the grading inputs and publish the results.

    A student error (or a grader error) stops at its case and is published with
    the results of the cases before it; the verdict outside reports the cases
    in order, as ``check`` does. Returns the payload (for tests).
    """
    from .observations import OBSERVATION, observation_payload

    check_def = _check_def(assignment, check_name, framework)
    observed, error = {}, None
    case = check_def.cases[0]
    try:
        ref = _reference.load(assignment, os.environ.get(INPUTS_ENV) or None)
        for case in check_def.cases:
            observed.update(observe(assignment, check_name, framework, namespace,
                                    ref, case))
    except GradingError as exc:
        error = {"case": case, "message": str(exc)}
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001  (a grader bug must not leak data)
        error = {"case": case, "message": str(internal_error(exc))}
    payload = observation_payload(assignment, check_name, framework, observed, error)
    _publish(OBSERVATION, json.dumps(payload))
    return payload


def check(assignment: str, check_name: str, framework: str, namespace=None,
          reference=None) -> None:
    """Hidden test: run the student's code on the reference data and judge it.

    ``namespace`` defaults to the caller's globals (the notebook). Cases are
    judged one by one, so the first wrong case is the one reported. Returns
    None (a number as a test cell's last value would mean partial credit).
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    if observing() and reference is None:
        record(assignment, check_name, framework, namespace)
        return None
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
