"""What every runner needs: finding the student's object, calling it, gradients.

A *runner* runs the student's code of one check on the grading inputs of one
case, inside the student's kernel, and returns plain NumPy results. It never
judges: the expected outputs are not here (they live in the grader process,
``grader.assignments``).
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from grader.kernel.adapters import (
    tf_gradients,
    to_framework,
    to_numpy,
    torch_gradients,
    unpack,
    weighted_sum,
)
from grader.kernel.errors import GradingError, call_student


@dataclass(frozen=True)
class Run:
    """How the kernel runs one check: ``run(framework, namespace, inputs)``.

    ``cases`` are the input cases the check uses (in order); ``gradients``
    says whether the run also differentiates the student's result.
    """

    run: Callable[..., dict]
    cases: tuple[str, ...]
    gradients: bool = False


def lookup(namespace: dict, name: str):
    """The student's object called ``name`` in the notebook's namespace."""
    if name not in namespace:
        raise GradingError(
            f"{name} is not defined: run the cell that defines it, and keep the "
            f"name the exercise asks for"
        )
    return namespace[name]


def tensors(framework: str, inputs: dict, names, variables=()):
    """The named inputs as framework tensors; ``variables`` are differentiable."""
    return {
        n: to_framework(framework, inputs[n], variable=n in variables) for n in names
    }


def call_and_unpack(what, fn, args, kwargs, outputs):
    return unpack(call_student(what, fn, *args, **kwargs), outputs, what)


def numpy_results(results: dict, what: str) -> dict:
    return {k: to_numpy(v, f"{what}: {k}") for k, v in results.items()}


def loss_of(framework, outputs: dict, upstream: dict):
    """Sum over outputs of sum(output * upstream): a scalar to differentiate."""
    total = 0
    for name, g in upstream.items():
        total = total + weighted_sum(framework, outputs[name], g)
    return total


def with_gradients(framework: str, forward, sources: dict, upstream: dict, what: str):
    """Results of ``forward()`` plus ``grad_<name>`` for each of ``sources``.

    The loss is ``sum(result[k] * upstream[k])`` over the keys of ``upstream``
    (framework tensors), so the gradients are vector-Jacobian products with
    known upstream gradients -- what the grader's reference differentiates.
    """
    grad = tf_gradients if framework == "tf" else torch_gradients
    out, grads = grad(forward, sources, lambda r: loss_of(framework, r, upstream))
    results = numpy_results(out, what)
    results.update({f"grad_{k}": v for k, v in numpy_results(grads, what).items()})
    return results


__all__ = [
    "GradingError",
    "Run",
    "call_and_unpack",
    "call_student",
    "lookup",
    "loss_of",
    "np",
    "numpy_results",
    "tensors",
    "with_gradients",
]
