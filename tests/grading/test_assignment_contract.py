"""What every assignment promises the grader, checked on all fifteen at once.

Sandboxed grading draws new inputs for each student (``grader.fresh``: the
assignment's ``make_cases(seed)`` with a seed of its own) and accepts a draw
only if every known mistake stays distinguishable on it, trying the next seed
otherwise. Here, for every assignment:

* ``make_cases(seed)`` is a function of the seed (the same seed gives the same
  inputs, another seed other inputs) and leaves the module as it was;
* on each of FRESH_SEEDS (two runs of consecutive seeds), every known
  mistake (``check.variants``) is distinguishable at once, so a student's
  draw rarely needs a second seed and never needs the last of
  ``fresh.ATTEMPTS``.
"""

import numpy as np
import pytest

from grader import assignments
from grader.build_references import check_variants

FRESH_SEEDS = (*range(5000, 5005), *range(7000, 7006))


def _with_variants(module, cases: dict) -> dict:
    """The cases some known mistake is judged on (the others, e.g. the long
    memory cases of part 4, have no variants and cost seconds to compute)."""
    wanted = {
        c for check in module.CHECKS.values() if check.variants for c in check.cases
    }
    return {c: inputs for c, inputs in cases.items() if c in wanted}


def _flat(cases: dict) -> dict:
    return {
        (case, key): np.asarray(value)
        for case, inputs in cases.items()
        for key, value in inputs.items()
    }


@pytest.mark.parametrize("assignment", list(assignments.ASSIGNMENTS))
def test_make_cases_is_a_function_of_the_seed(assignment):
    module = assignments.get(assignment)
    seed = module.SEED
    first, again, other = (
        _flat(module.make_cases(s))
        for s in (FRESH_SEEDS[0], FRESH_SEEDS[0], FRESH_SEEDS[-1])
    )
    assert seed == module.SEED
    assert first.keys() == again.keys()
    assert all(np.array_equal(first[k], again[k]) for k in first)
    drawn = [k for k in first if first[k].dtype.kind == "f" and first[k].size > 1]
    assert drawn, f"{assignment}: no drawn float inputs"
    # another seed draws other values (and may draw other sizes): no float
    # input is the same, so no answer computed for one draw passes another
    same = [
        k
        for k in drawn
        if k in other
        and first[k].shape == other[k].shape
        and np.array_equal(first[k], other[k])
    ]
    assert not same, same


@pytest.mark.parametrize("assignment", list(assignments.ASSIGNMENTS))
def test_fresh_draws_keep_every_mistake_distinguishable(assignment):
    module = assignments.get(assignment)
    assert any(check.variants for check in module.CHECKS.values()), assignment
    for seed in FRESH_SEEDS:
        cases = _with_variants(module, module.make_cases(seed))
        expected = {c: module.expected(c, inputs) for c, inputs in cases.items()}
        check_variants(module, cases, expected)
