"""The tiny-transformer assignment's inputs hold on fresh draws (NumPy only).

Its checks judge numbers that fresh inputs make unpredictable -- except that
an error check has a natural constant answer ("both calls raise"), and
find_heads a small one (three head indices). These tests draw per-student
inputs as grading does and check that neither can be guessed, that the
planted heads win by a wide margin (no tie decides an honest answer), and
that the reference equals the definitions written as loops on every draw.
"""

import collections

import numpy as np
import pytest

from grader import fresh, reference
from grader.assignments import tiny_transformer as task

A = "tiny-transformer"
DRAWS = [fresh.draw(A, 7919 * k + 3) for k in range(24)]


def cases(arrays):
    return reference.ReferenceData(arrays)


def test_error_outcomes_are_not_a_constant_answer():
    """A forged 'errors' result must compute which calls must raise: the
    outcomes of one draw (e.g. a leaked one) fail most other draws."""
    patterns = collections.Counter(
        tuple(cases(a).expected("errors")["outcomes"]) for a in DRAWS
    )
    assert len(patterns) >= 8, patterns
    leaked = next(iter(patterns))
    assert patterns[leaked] <= len(DRAWS) // 3
    for a in DRAWS:
        outcomes = cases(a).expected("errors")["outcomes"]
        # three calls must raise, three must return (the always-raise and
        # never-raise answers fail every draw)
        assert sorted(outcomes.tolist()) == [0, 0, 0, 1, 1, 1]


def test_planted_heads_are_drawn_and_win_clearly():
    heads = collections.Counter()
    for a in DRAWS:
        data = cases(a)
        for case in task.RUNS["find_heads"].cases:
            inputs = data.inputs(case)
            heads[case, tuple(data.expected(case)["heads"])] += 1
            for scores in (
                task._score(inputs, task._previous_coef(inputs["weights"])),
                task._duplicate(inputs)["scores"],
                task._induction(inputs)["scores"],
            ):
                top = np.sort(scores)
                assert top[-1] - top[-2] > 0.3, scores
    for case in task.RUNS["find_heads"].cases:
        seen = [h for (c, h) in heads if c == case]
        assert len(seen) >= 6, (case, seen)


@pytest.mark.parametrize("k", range(0, 24, 4))
def test_reference_is_the_definition_on_fresh_draws(k):
    data = cases(DRAWS[k])
    for case in (*task.RUNS["duplicate"].cases, *task.RUNS["induction"].cases):
        inputs = data.inputs(case)
        np.testing.assert_allclose(
            data.expected(case)["scores"],
            task._loops(case, inputs)["scores"],
            atol=1e-12,
        )


@pytest.mark.parametrize("case", ["copies", "repeats"])
def test_copy_cases_hold_what_the_definitions_are_about(case):
    """Every draw has tokens that repeat more than once, queries without an
    earlier copy, an adjacent repeat, and sequences with different counts."""
    for a in DRAWS:
        t = cases(a).inputs(case)["tokens"]
        earlier = task._earlier(t)
        copies = earlier.sum(axis=-1)
        assert (copies >= 2).any() and (copies == 0).any()
        assert (t[:, 1:] == t[:, :-1]).any()
        assert len(set(earlier.any(axis=-1).sum(axis=1).tolist())) > 1
