"""Typical wrong implementations of the exercises, and what grading must say.

Each Bug edits the reference solution of one framework part (TensorFlow or
PyTorch) with one typical mistake; ``lost`` lists the test cells (grade ids)
that must score 0, ``tag`` the likely mistake the feedback must name and
``says`` plain advice it must contain (for code that raises). A student
notebook combines one TensorFlow bug and one PyTorch bug, so each part is
graded separately and its points are lost independently.

Here every bug runs in this process (fast, no nbgrader); test_exercises_grading
runs the notebooks of support.grading.STUDENTS through the real nbgrader CLI.
The second half checks the generic feedback (what differs when no known
mistake matches) and the plain advice for framework errors, on made-up
results: each case is built so that the message would lack the fact before
the feature existed.
"""

import numpy as np
import pytest
from support.grading import (
    BUGS,
    WARNING_EDITS,
    expected_lost,
    run_in_process,
    student_solutions,
)

import attncourse  # noqa: F401  (quiet TF first)
from grader import assignments as tasks
from grader import leaks
from grader.checks import verdict
from grader.kernel.errors import GradingError, call_student, explain

# every student notebook of the catalogue (the CLI test grades only a few)
CASES = sorted({(b.assignment, b.student) for b in BUGS})

# A correct solution that makes the frameworks warn in graded cells: a PyTorch
# UserWarning (stderr) and a TensorFlow deprecation message (logged to stdout
# in a kernel). It must still get full marks (nbgrader's IgnorePattern, see
# grader.noise).


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("assignment", "student"), CASES)
def test_bug_loses_exactly_its_cells_with_its_hint(assignment, student):
    results = run_in_process(assignment, student_solutions(assignment, student))
    failed = {gid for gid, err in results.items() if err}
    assert failed == expected_lost(assignment, student), results
    for bug in BUGS:
        if bug.assignment != assignment or bug.student != student:
            continue
        messages = [results[g] for g in bug.lost if "hidden" in g]
        if bug.tag:
            assert any(f"({bug.tag})" in m for m in messages), messages
        if bug.says:
            assert all(bug.says in m for m in messages), messages


def test_every_student_combines_at_most_one_bug_per_part():
    seen = [(b.assignment, b.student, b.part) for b in BUGS]
    assert len(seen) == len(set(seen))


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
@pytest.mark.parametrize("assignment", sorted(WARNING_EDITS))
def test_warning_solution_is_correct_in_process(assignment):
    results = run_in_process(assignment, student_solutions(assignment, "warning"))
    assert not any(results.values()), results


# ------------------------------------------------- generic feedback (no variant)
MHA = tasks.get("multi-head-attention")
SELF = tasks.get("self-attention")


def message(module, check, case, change):
    """The verdict's message for the reference result with ``change`` applied
    to its weights and outputs (a result no known mistake produces)."""
    inputs = module.make_cases()[case]
    exp = module.expected(case, inputs)
    obs = {k: change(k, np.array(v, dtype=np.float64)) for k, v in exp.items()}
    with pytest.raises(GradingError) as err:
        verdict(module.CHECKS[check], "torch", case, inputs, exp, obs)
    text = str(err.value)
    assert "Likely mistake" not in text, text  # these are not known mistakes
    ref = np.concatenate([np.ravel(v) for v in exp.values()])
    assert leaks.scan_text(text, {}, ref[np.abs(ref) > 1e-3], "message") == []
    return text


def test_generic_message_names_the_heads_and_the_permutation():
    text = message(
        MHA, "forward", "two_heads", lambda k, v: v[:, ::-1] if k == "weights" else v
    )
    assert "What differs:" in text
    assert "the heads are right but in reverse order" in text


def test_generic_message_names_one_batch_element_and_rows():
    def change(k, v):
        if k == "weights":
            v[1, :, 2] = v[1, :, 2][..., ::-1]  # query 2 of batch element 1
        return v

    text = message(MHA, "forward", "two_heads", change)
    assert "only in batch element 1 of 2" in text
    assert "only in query (row) 2 of 3" in text


def test_generic_message_reports_a_constant_factor():
    text = message(
        MHA, "forward", "two_heads", lambda k, v: 0.7 * v if k == "weights" else v
    )
    assert "a constant factor: every entry is about 0.7 times" in text
    assert "rows of weights do not sum to 1" in text


def test_generic_message_reports_an_offset_without_its_size():
    text = message(
        SELF, "forward", "plain", lambda k, v: v + 0.123 if k == "outputs" else v
    )
    facts = text.split("What differs: ")[1].splitlines()[0]
    assert facts == "a constant offset: every entry is shifted by the same amount."


def test_generic_message_reports_a_transpose():
    text = message(
        SELF,
        "forward",
        "plain",
        lambda k, v: np.swapaxes(v, -1, -2) if k == "weights" else v,
    )
    assert "the queries (rows) and keys (columns) axes are swapped" in text, text


def test_generic_message_reports_only_masked_positions():
    def change(k, v):
        if k == "weights":
            v = np.where(~SELF.make_cases()["padded"]["attention_mask"], 0.05, v)
        return v

    text = message(SELF, "masks", "padded", change)
    assert "only at masked positions" in text


def test_nan_message_says_where():
    def change(k, v):
        if k == "weights":
            v[0, 1] = np.nan  # one query row of batch element 0
        return v

    inputs = SELF.make_cases()["plain"]
    exp = SELF.expected("plain", inputs)
    obs = {k: change(k, np.array(v)) for k, v in exp.items()}
    with pytest.raises(
        GradingError,
        match=r"5 of 50 entries, only in batch "
        r"element 0 of 2; only in query",
    ):
        verdict(SELF.CHECKS["forward"], "tf", "plain", inputs, exp, obs)


# ------------------------------------------------- framework errors, explained
def raise_torch(kind):
    import torch

    q, k = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4)
    if kind == "transpose":
        return q @ k.transpose(1, 2)
    if kind == "view":
        return q.transpose(1, 2).view(2, 3, 8)
    if kind == "bool":
        return q.masked_fill(torch.ones(2, 1, 1, 4), -1e9)
    if kind == "batch_first":
        mha = torch.nn.MultiheadAttention(8, 2)
        return mha(torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8))
    raise ValueError(kind)


@pytest.mark.parametrize(
    ("kind", "advice"),
    [
        ("transpose", "transpose only the last two axes of the keys"),
        ("view", ".view() after .transpose()"),
        ("bool", "a mask is used as a boolean"),
        ("batch_first", "batch_first=True"),
    ],
)
def test_framework_errors_get_plain_advice(kind, advice):
    with pytest.raises(GradingError) as err:
        call_student("f(queries, keys)", raise_torch, kind)
    text = str(err.value)
    assert "f(queries, keys) raised" in text  # the framework's own message stays
    assert "\nWhat this usually means: " in text and advice in text, text


def test_tf_errors_lose_the_op_noise_and_get_advice():
    import tensorflow as tf

    def student():
        return tf.matmul(tf.ones((2, 3, 4)), tf.transpose(tf.ones((2, 5, 4))))

    with pytest.raises(GradingError) as err:
        call_student("f()", student)
    text = str(err.value)
    assert "{{function_node" not in text
    assert "transpose only the last two axes" in text


def test_unknown_errors_get_no_advice():
    assert explain(ValueError("my own check failed")) == ""
    with pytest.raises(GradingError) as err:
        call_student("f()", lambda: (_ for _ in ()).throw(KeyError("x")))
    assert "What this usually means" not in str(err.value)
