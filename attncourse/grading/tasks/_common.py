"""Helpers shared by the assignments' check definitions."""

import numpy as np

from ..adapters import to_framework, to_numpy, unpack
from ..errors import GradingError, call_student


def lookup(namespace: dict, name: str):
    """The student's object called ``name`` in the notebook's namespace."""
    if name not in namespace:
        raise GradingError(
            f"{name} is not defined: run the cell that defines it, and keep the "
            f"name the exercise asks for"
        )
    return namespace[name]


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def tensors(framework: str, inputs: dict, names, variables=()):
    """The named inputs as framework tensors; ``variables`` are differentiable."""
    return {n: to_framework(framework, inputs[n], variable=n in variables)
            for n in names}


def call_and_unpack(what, fn, args, kwargs, outputs):
    return unpack(call_student(what, fn, *args, **kwargs), outputs, what)


def numpy_results(results: dict, what: str) -> dict:
    return {k: to_numpy(v, f"{what}: {k}") for k, v in results.items()}


def loss_of(framework, outputs: dict, upstream: dict):
    """Sum over outputs of sum(output * upstream): a scalar to differentiate."""
    from ..adapters import weighted_sum

    total = 0
    for name, g in upstream.items():
        total = total + weighted_sum(framework, outputs[name], g)
    return total
