"""kv-cache: what a hostile student tries on this assignment's grading.

Four classes specific to the assignment (the generic ones -- sandbox,
staging, reference data, outputs -- are covered by the protection tests):

* a cache object that carries more than its values from one decoding step
  to the next (a tensor subclass with hidden state): the decode runner feeds
  back plain tensors rebuilt from the reported values;
* code that never uses the cache it is given (it keeps the tokens it saw and
  recomputes the full pass): the decode check alone cannot tell, the step
  check's random cache can;
* the library's own decoding and the frameworks' GQA built-ins: flagged for
  the instructor (``FORBIDDEN``), the honest solution is not;
* a capacity check that only pretends: the decode check's chunk that does
  not fit must raise a ValueError whose message names the capacity, read as
  a plain str (an exception whose __str__ returns a str subclass with its
  own ``lower`` cannot answer for it).
"""

import numpy as np
import pytest
import torch
from support.grading import student_solutions

import attncourse  # noqa: F401  (quiet TF first)
from grader import provenance
from grader.assignments import kv_cache as task
from grader.checks import verdict
from grader.kernel.errors import GradingError
from grader.kernel.runners import kv_cache as runner

CASES = task.make_cases()


def honest_namespace() -> dict:
    """The reference solution's functions, executed here."""
    namespace = {"tf": __import__("tensorflow"), "torch": torch}
    for part in ("tf", "torch"):
        exec(student_solutions(task.NAME, "reference")[f"{part}-solution"], namespace)
    return namespace


def judge(check: str, namespace: dict, framework="torch") -> None:
    """Run ``check`` through its runner and the verdict; raise if it fails."""
    c = task.CHECKS[check]
    for case in c.cases:
        inputs = CASES[case]
        observed = c.run(framework, namespace, inputs, gradients=c.runner.gradients)
        verdict(c, framework, case, inputs, task.expected(case, inputs), observed)


def test_reference_passes_every_check():
    namespace = honest_namespace()
    for framework in ("tf", "torch"):
        for check in task.CHECKS:
            judge(check, namespace, framework)


class Smuggler(torch.Tensor):
    """A cache tensor that carries a note to the next step."""


def test_decode_feeds_back_plain_tensors_not_the_students_objects():
    honest = honest_namespace()["gqa_step_torch"]
    seen = []

    def gqa_step_torch(x_new, cache_k, cache_v, t_past, params, heads, kv_heads):
        seen.append((type(cache_k), getattr(cache_k, "note", None)))
        out, k, v = honest(x_new, cache_k, cache_v, t_past, params, heads, kv_heads)
        k = k.as_subclass(Smuggler)
        k.note = "tokens so far"  # hidden state the next step could read
        return out, k, v

    judge("decode", {"gqa_step_torch": gqa_step_torch})
    assert len(seen) == len(task.CHUNKS) + 1  # and the chunk that does not fit
    # every step after the first got a plain tensor, without the note
    assert all(t is torch.Tensor and note is None for t, note in seen[1:]), seen


def history_student() -> dict:
    """Ignores the cache's contents: keeps every token it saw and attends over
    their recomputed keys (right for a cache it built itself); it returns
    caches of the right shape (the given ones with the new keys written)."""
    honest = honest_namespace()["gqa_step_torch"]
    tokens = []

    def gqa_step_torch(x_new, cache_k, cache_v, t_past, params, heads, kv_heads):
        if t_past == 0:
            tokens.clear()
        tokens.append(x_new)
        x, spare = torch.cat(tokens, dim=1), torch.zeros_like(cache_k)
        out, _, _ = honest(x, spare, spare.clone(), 0, params, heads, kv_heads)
        _, k, v = honest(x_new, cache_k, cache_v, t_past, params, heads, kv_heads)
        return out[:, -x_new.shape[1] :], k, v

    return {"gqa_step_torch": gqa_step_torch}


class SaysCapacity(str):
    def lower(self):
        return "capacity"


class Evasive(ValueError):
    def __str__(self):
        return SaysCapacity("no room")


def pretender(raised) -> dict:
    """The honest step, except that a chunk that does not fit raises
    ``raised`` (or nothing, when None: it is cut to the free slots)."""
    honest = honest_namespace()["gqa_step_torch"]

    def gqa_step_torch(x_new, cache_k, cache_v, t_past, params, heads, kv_heads):
        room = cache_k.shape[2] - t_past
        if x_new.shape[1] > room:
            if raised is not None:
                raise raised
            x_new = x_new[:, :room]
        return honest(x_new, cache_k, cache_v, t_past, params, heads, kv_heads)

    return {"gqa_step_torch": gqa_step_torch}


@pytest.mark.parametrize(
    ("raised", "says"),
    [
        (None, "(capacity-not-checked)"),
        (IndexError("capacity"), "(capacity-not-checked)"),
        (ValueError("no room"), "must name the capacity"),
        (Evasive(), "must name the capacity"),
    ],
)
def test_a_chunk_that_does_not_fit_must_raise_naming_the_capacity(raised, says):
    judge("decode", pretender(ValueError("over capacity")))
    with pytest.raises(GradingError) as error:
        judge("decode", pretender(raised))
    assert says in str(error.value)


def test_a_step_that_ignores_the_given_cache_fails_the_step_check():
    judge("decode", history_student())  # from its own cache it is right...
    with pytest.raises(GradingError, match="mismatch in outputs"):
        judge("step", history_student())  # ...but not on the grader's cache


SETUP = [
    ("setup", "import attncourse\nimport numpy as np\nimport tensorflow as tf\n"),
    ("setup", "import torch\n"),
]


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (
            "from attncourse.torch import decode_step\nout = decode_step(x, p, 4, 2)",
            "attncourse.torch.decode_step",
        ),
        (
            "import attncourse.tf as atf\nk = atf.repeat_kv(k, 4)",
            "attncourse.tf.repeat_kv",
        ),
        (
            "layer = attncourse.torch.GroupedQueryAttention(4, 2, 8)",
            "attncourse.torch.GroupedQueryAttention",
        ),
        (
            "c = attncourse.numpy.KVCache(k, v)",
            "attncourse.numpy.KVCache",
        ),
        (
            "o = attncourse.tf.grouped_query_attention(x, x, x, p, 4, 2)",
            "attncourse.tf.grouped_query_attention",
        ),
        (
            "import torch.nn.functional as F\n"
            "o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)",
            "torch.nn.functional.scaled_dot_product_attention",
        ),
        (
            "import keras\nlayer = keras.layers.GroupQueryAttention(2, 4, 2)",
            "keras.layers.GroupQueryAttention",
        ),
        (
            "m = attncourse.torch.causal_mask(2, 5, align='bottom_right')",
            "attncourse.torch.causal_mask",
        ),
    ],
)
def test_library_and_builtin_decoding_are_flagged(code, name):
    found = provenance.scan([("torch-solution", code)], task.FORBIDDEN, SETUP)
    assert any(name in note for note in found.calls), found


def test_honest_solution_uses_none_of_it():
    sol = student_solutions(task.NAME, "reference")
    cells = [(g, sol[g]) for g in ("tf-solution", "torch-solution")]
    found = provenance.scan(cells, task.FORBIDDEN, SETUP)
    assert not found.calls and not found.dynamic, found


def test_runner_sees_inputs_only():
    """The kernel gets what make_cases draws: no expected output, and the
    step cases' caches are random (not the projection of any tokens)."""
    for case, inputs in CASES.items():
        expected = task.expected(case, inputs)
        for key, value in expected.items():
            for name, given in inputs.items():
                if np.shape(given) == np.shape(value):
                    assert not np.allclose(given, value), (case, key, name)
    c = CASES["chunk"]
    k_of_x = task._split(c["x_new"] @ c["W_k"], int(c["num_kv_heads"]))
    t_past = int(c["t_past"])
    assert not np.allclose(c["cache_k"][:, :, t_past : t_past + 2], k_of_x)
    assert set(runner.RUNS) == set(task.CHECKS)
