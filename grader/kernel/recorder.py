"""What hidden tests call: ``check(assignment, check_name, framework)``.

In sandboxed grading (``python -m grader grade``; the kernel's environment has
``GRADER_MODE=observe``) ``check`` only *records*: it runs the student's code
(looked up by name in the notebook's namespace) on the inputs in
``$GRADER_INPUTS`` -- inputs only, drawn for this grading run -- and publishes
the plain NumPy results as a display output of the hidden test cell
(``grader.kernel.observations``). It never raises for a wrong or failing
student function, and it cannot judge: the expected outputs, the reference
implementations and the known mistakes are not in the sandbox. The grader
judges what it saw on the message stream (``grader.verdicts``).

Outside a grading kernel (tests, a notebook run by hand next to the grader's
files) ``check`` judges at once, with the grader-side ``grader.judging``; in the
sandbox that module does not exist.
"""

import json
import os
import sys

from grader.kernel import runners
from grader.kernel.adapters import FRAMEWORKS
from grader.kernel.errors import GradingError, internal_error
from grader.kernel.inputs import CaseData, load_file

MODE_ENV = "GRADER_MODE"
INPUTS_ENV = "GRADER_INPUTS"
MAX_RESULTS = 1024 * 1024  # bytes of results one hidden test publishes


def run_def(assignment: str, check_name: str, framework: str):
    """The kernel-side Run of one check (KeyError/ValueError for bad ids)."""
    runs = runners.runs(assignment)
    if check_name not in runs:
        raise KeyError(f"{assignment} has no check {check_name!r}; known: {list(runs)}")
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    return runs[check_name]


def observe(
    assignment: str,
    check_name: str,
    framework: str,
    namespace: dict,
    data: CaseData,
    case: str | None = None,
) -> dict:
    """{case: results} of the student's code on the inputs in ``data``."""
    run = run_def(assignment, check_name, framework)
    cases = run.cases if case is None else (case,)
    return {
        c: run.run(framework, namespace, data.inputs(c), gradients=run.gradients)
        for c in cases
    }


def grading_inputs() -> CaseData:
    """The inputs drawn for this grading run ($GRADER_INPUTS), or a clear error."""
    path = os.environ.get(INPUTS_ENV, "")
    if not path or not os.path.isfile(path):
        raise GradingError(
            f"the grading inputs were not found ({INPUTS_ENV}={path!r}): hidden "
            f"tests run only when the notebook is graded"
        )
    return load_file(path)


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
    the results of the cases before it; the grader reports the cases in order.
    Returns the payload (for tests).
    """
    from grader.kernel.observations import OBSERVATION, observation_payload

    run = run_def(assignment, check_name, framework)
    observed, error, size = {}, None, 0
    case = run.cases[0]
    try:
        data = grading_inputs()
        for case in run.cases:
            results = observe(assignment, check_name, framework, namespace, data, case)
            size += _check_size(results[case], size)
            observed.update(results)
    except GradingError as exc:
        error = {"case": case, "message": str(exc)}
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001  (a grader bug must not leak data)
        error = {"case": case, "message": str(internal_error(exc))}
    payload = observation_payload(assignment, check_name, framework, observed, error)
    _publish(OBSERVATION, json.dumps(payload))
    return payload


def _check_size(results: dict, used: int) -> int:
    """The bytes of one case's results; GradingError if the results would make
    the published payload too large (a wrong shape, not tampering)."""
    import numpy as np

    size = sum(np.asarray(v).nbytes for v in results.values() if v is not None)
    if used + size > MAX_RESULTS:
        shapes = ", ".join(
            f"{k} {np.shape(v)}" for k, v in results.items() if v is not None
        )
        raise GradingError(
            f"your results are far too large ({shapes}); check "
            f"the shapes the exercise asks for"
        )
    return size


def check(
    assignment: str, check_name: str, framework: str, namespace=None, reference=None
) -> None:
    """Hidden test: record the student's results (grading), or judge them here.

    ``namespace`` defaults to the caller's globals (the notebook). Returns None
    (a number as a test cell's last value would mean partial credit).
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    if observing() and reference is None:
        record(assignment, check_name, framework, namespace)
        return None
    try:
        from grader import judging
    except ImportError:
        raise GradingError(
            "hidden tests are judged by the grader: they run when your notebook "
            "is graded"
        ) from None
    judging.check_here(assignment, check_name, framework, namespace, reference)
    return None
