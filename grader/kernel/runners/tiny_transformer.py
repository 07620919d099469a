"""Kernel side of ``tiny-transformer``: the student's head scores.

Only calls the student's functions on the case's inputs and returns what they
give: the scores (and their gradient w.r.t. the maps), the three head indices,
and for the error cases whether a ValueError was raised (an outcome code).
The outcome codes are bound into ``outcome`` when it is defined (a default
argument, which the integrity probe watches with the function): rebinding
the module's constants later changes nothing.
"""

from grader.kernel.adapters import to_numpy
from grader.kernel.errors import GradingError, student_error
from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    lookup,
    tensors,
    with_gradients,
)
from grader.kernel.runners.transformer_block import real_results

DUPLICATE = {"tf": "duplicate_token_score_tf", "torch": "duplicate_token_score_torch"}
INDUCTION = {"tf": "induction_score_tf", "torch": "induction_score_torch"}
FIND = {"tf": "find_heads_tf", "torch": "find_heads_torch"}
ERRORS = {fw: f"{DUPLICATE[fw]} and {INDUCTION[fw]}" for fw in ("tf", "torch")}
# outcome codes of the error cases: what the call did
RETURNED, VALUE_ERROR, OTHER_ERROR = 0, 1, 2


def _copy_score(names: dict):
    """The runner of a score of (weights, tokens) with its gradient."""

    def run(
        framework: str, namespace: dict, inputs: dict, gradients: bool = True
    ) -> dict:
        name = names[framework]
        fn = lookup(namespace, name)
        t = tensors(
            framework, inputs, ("weights", "tokens", "upstream"), variables=("weights",)
        )
        what = f"{name}(weights, tokens)"

        def forward():
            args = (t["weights"], t["tokens"])
            return call_and_unpack(what, fn, args, {}, ("scores",))

        sources = {"weights": t["weights"]}
        upstream = {"scores": t["upstream"]}
        return with_gradients(framework, forward, sources, upstream, name)

    return run


run_duplicate = _copy_score(DUPLICATE)
run_induction = _copy_score(INDUCTION)


def head_index(value, what: str):
    """A head index the student returned (int, 0-d tensor) as a Python int;
    anything else (NaN, a huge number, several numbers) is their error."""
    import numpy as np

    arr = to_numpy(value, what)
    if arr is None or arr.size != 1 or arr.dtype.kind not in "iuf":
        shape = "None" if arr is None else f"shape {arr.shape}, dtype {arr.dtype}"
        raise GradingError(f"{what} should be one head index (an int), got {shape}")
    x = float(arr.reshape(()).astype(np.float64))
    if not (abs(x) < 2**31 and x == int(x)):
        raise GradingError(f"{what} should be a whole head index, got {x:g}")
    return int(x)


def run_find(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    import numpy as np

    name = FIND[framework]
    fn = lookup(namespace, name)
    t = tensors(framework, inputs, ("weights", "tokens"))
    what = f"{name}(weights, tokens)"
    out = call_and_unpack(
        what,
        fn,
        (t["weights"], t["tokens"]),
        {},
        ("previous", "duplicate", "induction"),
    )
    heads = [head_index(out[k], f"{what}: the {k} head") for k in out]
    return {"heads": np.array(heads, dtype=np.int64)}


def outcome(what: str, fn, args, codes=(RETURNED, VALUE_ERROR, OTHER_ERROR)) -> int:
    """What calling the student's fn did: returned, ValueError, other error."""
    returned, value_error, other = codes
    try:
        fn(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except NotImplementedError as exc:
        raise student_error(what, exc) from None
    except ValueError:
        return value_error
    except BaseException:  # noqa: BLE001  (student code may raise anything)
        return other
    return returned


def run_errors(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    """The outcome of each call of the case, in its (drawn) order: kinds[k]
    0 = duplicate_token_score(weights_k, tokens_k), 1 =
    induction_score(weights_k, tokens_k)."""
    import numpy as np

    functions = (
        (DUPLICATE[framework], lookup(namespace, DUPLICATE[framework])),
        (INDUCTION[framework], lookup(namespace, INDUCTION[framework])),
    )
    outcomes = []
    for k, kind in enumerate(np.asarray(inputs["kinds"]).tolist()):
        name, fn = functions[kind]
        t = tensors(framework, inputs, (f"weights_{k}", f"tokens_{k}"))
        args = (t[f"weights_{k}"], t[f"tokens_{k}"])
        outcomes.append(outcome(f"{name}(weights, tokens)", fn, args))
    return {"outcomes": np.array(outcomes, dtype=np.int64)}


RUNS = {
    "duplicate": Run(
        real_results(run_duplicate, DUPLICATE),
        cases=("copies", "copies_mixed"),
        gradients=True,
    ),
    "induction": Run(
        real_results(run_induction, INDUCTION),
        cases=("repeats", "mixed"),
        gradients=True,
    ),
    "find_heads": Run(run_find, cases=("model", "small")),
    "errors": Run(run_errors, cases=("errors",)),
}
