"""Checks, known wrong variants, and the verdict that names a likely mistake.

A *check* is one graded unit of an assignment (one hidden test cell per
framework). It runs the student's code on the reference inputs of one or more
*cases* (``observe``: inside the student's kernel, framework code), then
compares the results with the reference outputs (``verdict``: NumPy only, so it
can run in another process). When a result is wrong, the verdict recomputes the
check's known wrong *variants* on the same inputs -- missing 1/sqrt(d_k),
softmax over the wrong axis, inverted mask, ... -- and names the one the
student's result matches. Messages give shapes, counts and sizes of
differences, never reference values.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from grader.kernel.errors import GradingError
from grader.kernel.runners._common import Run

ATOL, RTOL = 2e-5, 2e-4  # float32 student code vs the float64 reference
GRAD_ATOL, GRAD_RTOL = 1e-4, 1e-3


@dataclass(frozen=True)
class Variant:
    """A known mistake: ``compute(inputs)`` gives what code with the bug returns."""

    tag: str
    hint: str
    compute: Callable[[dict], dict]
    cases: tuple[str, ...] | None = None  # None: every case of the check


@dataclass(frozen=True)
class Check:
    """One graded unit: how the kernel runs it, what to compare, known mistakes.

    ``runner`` (``grader.kernel.runners``) runs the student's code in the
    kernel and returns a dict of NumPy arrays (None for a gradient that did
    not arrive); its ``cases`` are the check's cases. ``targets`` names the
    student's object per framework (for messages).
    """

    name: str
    runner: Run
    targets: dict
    compare: tuple[str, ...]
    variants: tuple[Variant, ...] = ()
    case_notes: dict = field(default_factory=dict)
    nan_hint: str = ""
    reminder: str = ""

    @property
    def cases(self) -> tuple[str, ...]:
        return self.runner.cases

    @property
    def run(self):
        return self.runner.run


def _tolerances(key):
    return (GRAD_ATOL, GRAD_RTOL) if key.startswith("grad_") else (ATOL, RTOL)


def _close(a, b, key) -> bool:
    if a is None or b is None or a.shape != b.shape:
        return False
    if b.dtype.kind in "biu":
        return bool(np.array_equal(a.astype(np.int64), b.astype(np.int64)))
    atol, rtol = _tolerances(key)
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.isfinite(a)) and np.allclose(a, b, atol=atol, rtol=rtol))


def diagnose(check: Check, case: str, inputs: dict, observed: dict) -> Variant | None:
    """The first known wrong variant that the observed results match, if any."""
    for variant in check.variants:
        if variant.cases is not None and case not in variant.cases:
            continue
        predicted = variant.compute(inputs)
        keys = [k for k in predicted if observed.get(k) is not None]
        if keys and all(_close(observed[k], np.asarray(predicted[k]), k) for k in keys):
            return variant
    return None


def _describe_difference(obs, exp, key) -> str:
    if exp.dtype.kind in "biu":
        bad = obs.astype(np.int64) != exp.astype(np.int64)
        return f"{int(bad.sum())} of {bad.size} entries differ"
    atol, rtol = _tolerances(key)
    diff = np.abs(obs - exp)
    bad = diff > atol + rtol * np.abs(exp)
    return (f"{int(bad.sum())} of {bad.size} entries are off by more than "
            f"{atol:g} + {rtol:g}*|expected| (largest difference {diff.max():.2g})")


def _label(key: str) -> str:
    """How a compared key is named in messages: grad_W_q -> gradients w.r.t. W_q."""
    return f"gradients w.r.t. {key[5:]}" if key.startswith("grad_") else key


def verdict(check: Check, framework: str, case: str, inputs: dict, expected: dict,
            observed: dict) -> None:
    """Raise GradingError naming what is wrong (and the likely mistake), or pass."""
    who = check.targets[framework]
    note = check.case_notes.get(case, "")
    where = f'case "{case}"' + (f" ({note})" if note else "")
    for key in check.compare:
        exp = np.asarray(expected[key])
        obs = observed.get(key)
        if obs is None:
            if key.startswith("grad_"):
                name = key.removeprefix("grad_")
                raise GradingError(
                    f"{who}: no gradient reaches {name} ({where}).\nLikely mistake "
                    f"(no-gradient): the computation leaves the framework (NumPy, "
                    f".numpy(), float(), detach/stop_gradient) or {name} is not a "
                    f"trainable weight; keep every step in "
                    f"{'TensorFlow' if framework == 'tf' else 'PyTorch'} operations."
                )
            raise GradingError(f"{who} returned no {key} ({where})")
        obs = np.asarray(obs)
        if obs.shape != exp.shape and obs.size == exp.size == 1:
            obs = obs.reshape(exp.shape)
        if obs.shape != exp.shape:
            msg = (f"{who}: {_label(key)} have shape {obs.shape}, expected {exp.shape} "
                   f"({where}).")
            if obs.ndim >= 2 and obs.shape[:-2] + obs.shape[-2:][::-1] == exp.shape:
                msg += ("\nLikely mistake (swapped-axes): the last two axes are "
                        "swapped -- queries index the rows, keys the columns.")
            raise GradingError(msg)
        if exp.dtype.kind == "b" and obs.dtype.kind != "b":
            raise GradingError(f"{who}: {_label(key)} must be boolean (True = "
                               f"attend), got dtype {obs.dtype} ({where})")
        if obs.dtype.kind == "f" and not np.all(np.isfinite(obs)):
            variant = diagnose(check, case, inputs, observed)
            msg = f"{who}: {_label(key)} contain NaN or inf ({where})."
            if variant is not None:
                msg += f"\nLikely mistake ({variant.tag}): {variant.hint}"
            elif check.nan_hint:
                msg += f"\n{check.nan_hint}"
            raise GradingError(msg)
        if _close(obs, exp, key):
            continue
        shown = obs.astype(exp.dtype) if exp.dtype.kind in "biu" else obs
        msg = (f"{who}: {_label(key)} do not match the reference ({where}): "
               f"{_describe_difference(shown, exp, key)}.")
        variant = diagnose(check, case, inputs, observed)
        if variant is not None:
            msg += f"\nLikely mistake ({variant.tag}): {variant.hint}"
        elif key.startswith("grad_") and not np.any(obs):
            msg += ("\nLikely mistake (no-gradient): the gradient is zero -- part of "
                    "the computation is cut off from autodiff.")
        elif check.reminder:
            msg += ("\nNo known mistake matches. Check against the interface: "
                    + check.reminder)
        raise GradingError(msg)
