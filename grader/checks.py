"""Checks, known wrong variants, and the verdict that names a likely mistake.

A *check* is one graded unit of an assignment (one hidden test cell per
framework). It runs the student's code on the reference inputs of one or more
*cases* (``observe``: inside the student's kernel, framework code), then
compares the results with the reference outputs (``verdict``: NumPy only, so it
can run in another process). When a result is wrong, the verdict recomputes the
check's known wrong *variants* on the same inputs -- missing 1/sqrt(d_k),
softmax over the wrong axis, inverted mask, ... -- and names the one the
student's result matches. When none does, the message says what differs
(``_pattern``): which batch elements, heads, queries (rows) or keys hold the
wrong entries, a constant factor (rounded to 2 digits), a permutation of heads
or rows, swapped axes, only masked positions. Messages give shapes, counts and
sizes of differences (the largest one, 2 digits), never reference values.
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
    # positions that must get weight 0: hidden(inputs) -> bool array (True =
    # masked) broadcastable to the compared "weights", or None
    hidden: Callable[[dict], np.ndarray | None] | None = None

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
    return (
        f"{int(bad.sum())} of {bad.size} entries are off by more than "
        f"{atol:g} + {rtol:g}*|expected| (largest difference {diff.max():.2g})"
    )


# What the axes of a compared array are, by key and number of axes (singular,
# plural): messages say "in heads 0 and 1 of 4", "in query (row) 2 of 3".
_BATCH = ("batch element", "batch elements")
_QUERY = ("query (row)", "queries (rows)")
_KEY = ("key (column)", "keys (columns)")
_FEATURE = ("feature", "features")
_AXES = {
    ("weights", 4): (_BATCH, ("head", "heads"), _QUERY, _KEY),
    ("weights", 3): (_BATCH, _QUERY, _KEY),
    ("scores", 3): (_BATCH, _QUERY, _KEY),
    ("grad_scores", 3): (_BATCH, _QUERY, _KEY),
    ("outputs", 3): (_BATCH, _QUERY, _FEATURE),
    ("grad_queries", 3): (_BATCH, _QUERY, _FEATURE),
    ("grad_keys", 3): (_BATCH, ("key", "keys"), _FEATURE),
    ("grad_values", 3): (_BATCH, ("key", "keys"), _FEATURE),
    ("grad_inputs", 3): (_BATCH, ("position", "positions"), _FEATURE),
    ("indices", 2): (_BATCH, ("query", "queries")),
    ("log_probs", 2): (_BATCH, ("query", "queries")),
    ("mask", 2): (_BATCH, ("position", "positions")),
}
MAX_LISTED = 6


def _axes(key: str, ndim: int):
    return _AXES.get((key, ndim))


def _where(bad: np.ndarray, axes) -> list[str]:
    """Along which axes the wrong entries are confined: "in heads 1 of 2"."""
    found = []
    for axis, (one, many) in enumerate(axes):
        n = bad.shape[axis]
        hit = np.flatnonzero(
            bad.any(axis=tuple(a for a in range(bad.ndim) if a != axis))
        )
        if n < 2 or len(hit) in (0, n):
            continue
        if len(hit) > MAX_LISTED:
            found.append(f"in {len(hit)} of {n} {many}")
            continue
        names = ", ".join(str(int(h)) for h in hit[:-1])
        names = f"{names} and {int(hit[-1])}" if names else str(int(hit[-1]))
        found.append(f"only in {one if len(hit) == 1 else many} {names} of {n}")
    return found


def _permutation(obs, exp, axis, close) -> list[int] | None:
    """p with obs.take(i) == exp.take(p[i]) along axis, if one exists."""
    n = obs.shape[axis]
    perm = []
    for i in range(n):
        a = np.take(obs, i, axis=axis)
        match = [j for j in range(n) if close(a, np.take(exp, j, axis=axis))]
        if len(match) != 1:
            return None
        perm.append(match[0])
    return perm if sorted(perm) == list(range(n)) else None


def _pattern(obs, exp, key, hidden=None) -> list[str]:
    """Plain-language facts about how a wrong float result differs.

    Only shapes, positions, counts and a ratio rounded to 2 digits -- never
    reference values (the offset's size is the largest difference, already
    given with 2 digits; it is not repeated): which
    batch elements / heads / rows hold the wrong entries, a constant factor or
    offset, a permutation of heads or rows, two axes swapped, only masked (or
    only unmasked) positions, rows of weights that do not sum to 1.
    """
    atol, rtol = _tolerances(key)

    def close(a, b):
        return a.shape == b.shape and bool(np.allclose(a, b, atol=atol, rtol=rtol))

    bad = np.abs(obs - exp) > atol + rtol * np.abs(exp)
    axes = _axes(key, obs.ndim)
    facts = _where(bad, axes) if axes is not None else []
    facts += _scale_facts(obs, exp, atol, close)
    if axes is not None:
        facts += _order_facts(obs, exp, axes, close)
    if hidden is not None and bad.any():
        facts += _mask_facts(bad, hidden)
    if key == "weights" and obs.ndim >= 2:
        facts += _row_sum_facts(obs, exp)
    return facts


def _scale_facts(obs, exp, atol, close) -> list[str]:
    """A constant factor or a constant offset between the two."""
    norm = float(np.sum(exp * exp))
    factor = float(np.sum(obs * exp)) / norm if norm > 0 else 1.0
    shift = float(np.mean(obs - exp))
    if abs(factor - 1) > 1e-2 and close(obs, factor * exp):
        return [
            f"a constant factor: every entry is about {factor:.2g} "
            f"times the expected one"
        ]
    if abs(shift) > atol and close(obs, exp + shift):
        return ["a constant offset: every entry is shifted by the same amount"]
    return []


def _order_facts(obs, exp, axes, close) -> list[str]:
    """Heads or rows permuted along one axis; two axes swapped."""
    facts = []
    for axis, (_, many) in enumerate(axes):
        if obs.shape[axis] < 2 or many == _FEATURE[1]:
            continue
        perm = _permutation(obs, exp, axis, close)
        if perm is not None and perm != list(range(len(perm))):
            order = (
                "in reverse order"
                if perm == list(range(len(perm)))[::-1]
                else "in a different order (a permutation)"
            )
            facts.append(f"the {many} are right but {order}")
    for a in range(obs.ndim):
        for b in range(a + 1, obs.ndim):
            swapped = obs.shape[a] == obs.shape[b] > 1
            if swapped and close(obs, np.swapaxes(exp, a, b)):
                facts.append(
                    f"the {axes[a][1]} and {axes[b][1]} axes are "
                    f"swapped (a transpose of the expected result)"
                )
    return facts


def _mask_facts(bad, hidden) -> list[str]:
    """Wrong only where the mask hides, or only where it allows."""
    try:
        masked = np.broadcast_to(np.asarray(hidden, dtype=bool), bad.shape)
    except ValueError:
        return []
    if not masked.any() or masked.all():
        return []
    if not (bad & ~masked).any():
        return [
            "only at masked positions (attention_mask False): they must get weight 0"
        ]
    if not (bad & masked).any():
        return ["only at positions the mask allows (the masked ones are right)"]
    return []


def _row_sum_facts(obs, exp) -> list[str]:
    """Rows of attention weights that do not sum to 1 (where they should)."""
    exp_sums, obs_sums = exp.sum(axis=-1), obs.sum(axis=-1)
    off = (np.abs(exp_sums - 1) < 1e-6) & (np.abs(obs_sums - 1) > 1e-3)
    if not off.any():
        return []
    return [
        f"{int(off.sum())} of {off.size} rows of weights do not sum to 1 over the keys"
    ]


def _label(key: str) -> str:
    """How a compared key is named in messages: grad_W_q -> gradients w.r.t. W_q."""
    return f"gradients w.r.t. {key[5:]}" if key.startswith("grad_") else key


def _missing(who: str, key: str, framework: str, where: str) -> GradingError:
    """A result or gradient that the student's code did not produce."""
    if key.startswith("grad_"):
        name = key.removeprefix("grad_")
        return GradingError(
            f"{who}: no gradient reaches {name} ({where}).\nLikely mistake "
            f"(no-gradient): the computation leaves the framework (NumPy, "
            f".numpy(), float(), detach/stop_gradient) or {name} is not a "
            f"trainable weight; keep every step in "
            f"{'TensorFlow' if framework == 'tf' else 'PyTorch'} operations."
        )
    return GradingError(f"{who} returned no {key} ({where})")


def _wrong_shape(who: str, key: str, obs, exp, where: str) -> GradingError:
    msg = (
        f"{who}: {_label(key)} have shape {obs.shape}, expected {exp.shape} ({where})."
    )
    if obs.ndim >= 2 and obs.shape[:-2] + obs.shape[-2:][::-1] == exp.shape:
        msg += (
            "\nLikely mistake (swapped-axes): the last two axes are "
            "swapped -- queries index the rows, keys the columns."
        )
    return GradingError(msg)


def _not_finite(check, who, key, obs, where, variant) -> GradingError:
    axes = _axes(key, obs.ndim)
    spots = _where(~np.isfinite(obs), axes) if axes else []
    msg = (
        f"{who}: {_label(key)} contain NaN or inf ({where}): "
        f"{int(np.sum(~np.isfinite(obs)))} of {obs.size} entries"
        + (f", {'; '.join(spots)}" if spots else "")
        + "."
    )
    if variant is not None:
        msg += f"\nLikely mistake ({variant.tag}): {variant.hint}"
    elif check.nan_hint:
        msg += f"\n{check.nan_hint}"
    return GradingError(msg)


def _mismatch(check, who, key, obs, exp, inputs, where, variant) -> GradingError:
    """Values differ: the likely mistake if one matches, else what differs."""
    shown = obs.astype(exp.dtype) if exp.dtype.kind in "biu" else obs
    msg = (
        f"{who}: mismatch in {_label(key)} against the reference ({where}): "
        f"{_describe_difference(shown, exp, key)}."
    )
    if variant is not None:
        msg += f"\nLikely mistake ({variant.tag}): {variant.hint}"
    elif key.startswith("grad_") and not np.any(obs):
        msg += (
            "\nLikely mistake (no-gradient): the gradient is zero -- part of "
            "the computation is cut off from autodiff."
        )
    else:
        facts = _facts(check, key, shown, exp, inputs)
        if facts:
            msg += "\nWhat differs: " + "; ".join(facts) + "."
        if check.reminder:
            msg += (
                "\nNo known mistake matches. Check against the interface: "
                + check.reminder
            )
    return GradingError(msg)


def verdict(
    check: Check,
    framework: str,
    case: str,
    inputs: dict,
    expected: dict,
    observed: dict,
) -> None:
    """Raise GradingError naming what is wrong (and the likely mistake), or pass."""
    who = check.targets[framework]
    note = check.case_notes.get(case, "")
    where = f'case "{case}"' + (f" ({note})" if note else "")
    for key in check.compare:
        exp = np.asarray(expected[key])
        if observed.get(key) is None:
            raise _missing(who, key, framework, where)
        obs = np.asarray(observed[key])
        if obs.shape != exp.shape and obs.size == exp.size == 1:
            obs = obs.reshape(exp.shape)
        if obs.shape != exp.shape:
            raise _wrong_shape(who, key, obs, exp, where)
        if exp.dtype.kind == "b" and obs.dtype.kind != "b":
            raise GradingError(
                f"{who}: {_label(key)} must be boolean (True = "
                f"attend), got dtype {obs.dtype} ({where})"
            )
        if obs.dtype.kind == "f" and not np.all(np.isfinite(obs)):
            variant = diagnose(check, case, inputs, observed)
            raise _not_finite(check, who, key, obs, where, variant)
        if not _close(obs, exp, key):
            variant = diagnose(check, case, inputs, observed)
            raise _mismatch(check, who, key, obs, exp, inputs, where, variant)


def _facts(check: Check, key: str, obs, exp, inputs: dict) -> list[str]:
    """The generic description of a wrong result (see _pattern); never raises."""
    try:
        if exp.dtype.kind in "biu":
            bad = obs.astype(np.int64) != exp.astype(np.int64)
            axes = _axes(key, bad.ndim)
            return _where(bad, axes) if axes else []
        hidden = check.hidden(inputs) if check.hidden and key == "weights" else None
        with np.errstate(all="ignore"):  # the student's numbers may be huge
            return _pattern(
                np.asarray(obs, dtype=np.float64), exp.astype(np.float64), key, hidden
            )
    except Exception:  # noqa: BLE001  (a description must never break a verdict)
        return []
