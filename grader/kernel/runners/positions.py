"""Kernel side of ``positions``: the student's RoPE and RoPE attention scores.

The outcome codes of the odd head_dim are bound into ``odd_outcome`` when it
is defined (a default argument, which the integrity probe watches with the
function): rebinding the module's constants later changes nothing.
"""

import numpy as np

from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)
from grader.kernel.runners.transformer_block import real_results

ROPE = {"tf": "apply_rope_tf", "torch": "apply_rope_torch"}
SCORES = {"tf": "rope_scores_tf", "torch": "rope_scores_torch"}
SCORE_INPUTS = ("queries", "keys", "q_positions", "k_positions")
# what apply_rope did with an odd head_dim (the "odd_error" result)
RETURNED, RAISED_VALUE_ERROR, RAISED_OTHER = 0, 1, 2


def odd_outcome(
    fn, x, positions, codes=(RETURNED, RAISED_VALUE_ERROR, RAISED_OTHER)
) -> int:
    """How the student's apply_rope answers an odd head_dim: x without its
    last feature. Only the exception's class is read, never its message."""
    returned, value_error, other = codes
    odd = x[..., :-1]
    try:
        if positions is None:
            fn(odd)
        else:
            fn(odd, positions)
    except (KeyboardInterrupt, SystemExit):
        raise
    except ValueError:
        return value_error
    except BaseException:  # noqa: BLE001  (student code may raise anything)
        return other
    return returned


def run_rope(framework: str, namespace: dict, inputs: dict, gradients=False) -> dict:
    name = ROPE[framework]
    fn = lookup(namespace, name)
    t = tensors(framework, inputs, ("x", "positions"))
    if bool(inputs["has_positions"]):
        args, what = (t["x"], t["positions"]), f"{name}(x, positions)"
    else:
        args, what = (t["x"],), f"{name}(x)"
    out = call_and_unpack(what, fn, args, {}, ("outputs",))
    results = numpy_results(out, name)
    positions = t["positions"] if bool(inputs["has_positions"]) else None
    results["odd_error"] = np.array(odd_outcome(fn, t["x"], positions))
    return results


def run_scores(framework: str, namespace: dict, inputs: dict, gradients=False) -> dict:
    name = SCORES[framework]
    fn = lookup(namespace, name)
    variables = ("queries", "keys") if gradients else ()
    t = tensors(framework, inputs, SCORE_INPUTS, variables=variables)
    args = tuple(t[n] for n in SCORE_INPUTS)
    what = f"{name}({', '.join(SCORE_INPUTS)})"

    def forward():
        return call_and_unpack(what, fn, args, {}, ("scores",))

    if not gradients:
        return numpy_results(forward(), name)
    g = tensors(framework, inputs, ("upstream",))
    sources = {"queries": t["queries"], "keys": t["keys"]}
    return with_gradients(framework, forward, sources, {"scores": g["upstream"]}, name)


checked_rope = real_results(run_rope, ROPE)
checked_scores = real_results(run_scores, SCORES)
RUNS = {
    "rope": Run(checked_rope, cases=("default", "offset", "batched", "scattered")),
    "scores": Run(checked_scores, cases=("cached", "batched_scores")),
    "gradients": Run(checked_scores, cases=("cached",), gradients=True),
}
