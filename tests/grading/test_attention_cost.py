"""attention-cost: the memory case, the budget's edges and the honest ways.

* the memory case: ONE (n, n) float32 table of the direct method is larger
  than the sandbox's whole address space (so memory set aside before the
  call and freed in it cannot hold it) and 9 times what the runner lets the
  call map; a solution that ignores the budget fails fast and
  cleanly (TF and PyTorch), the process still computes, an honest one
  passes under a tighter existing limit; the grader's reference stays
  small, and every row counts (the kernel is told no rows);
* budget_chunk's edges: the exact boundaries are exact binary fractions (no
  honest rounding decides), integral floats are accepted and fractional ones
  named; any ValueError is the answer where nothing fits (its wording is
  not graded), another exception there is named;
* the student's odd values (inf, NaN, 1e30 rows; an object whose shape
  raises) are named as theirs, never as the grader's failure;
* honest variations (the course's masked_softmax, floats floored, a
  preallocated output, NumPy scalars) are never refused;
* the library's attention and table sizes, the frameworks' fused attention
  and resource limits are flagged (``FORBIDDEN``), the honest solution and
  masked_softmax are not;
* through the real grading command, in the sandbox (the session's whole-course
  run, ``support.course_batch``):
  the reference gets every point, a solution that ignores the budget loses
  the memory test in both parts, and one that raises its own soft memory
  limit first still cannot hold the tables.
"""

import math
import resource
import shutil
import time
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
import torch
from support.ci import skip_or_fail
from support.grading import student_solutions

import attncourse  # noqa: F401  (quiet TF first)
from grader import checks, provenance, sandbox
from grader.assignments import attention_cost as task
from grader.checks import verdict
from grader.kernel.errors import GradingError
from grader.kernel.runners import attention_cost as runner
from grader.kernel.runners import flash_attention as caps

CASES = task.make_cases()
SOLUTIONS = student_solutions(task.NAME, "reference")
MiB, GiB = 2**20, 2**30


def namespace(*parts, extra="") -> dict:
    """The reference solution's cells (``parts``), executed here."""
    ns = {"tf": __import__("tensorflow"), "torch": torch, "np": np, "math": math}
    for part in parts:
        exec(SOLUTIONS[f"{part}-solution"], ns)
    exec(extra, ns)
    return ns


EXPECTED = {}  # the memory case's reference (seconds each), computed once


def expected(case: str) -> dict:
    if case not in EXPECTED:
        EXPECTED[case] = task.expected(case, CASES[case])
    return EXPECTED[case]


def judge(check: str, ns: dict, framework="torch", cases=None) -> None:
    c = task.CHECKS[check]
    for case in cases or c.cases:
        inputs = CASES[case]
        observed = c.run(framework, ns, inputs, gradients=c.runner.gradients)
        verdict(c, framework, case, inputs, expected(case), observed)


def limits():
    return resource.getrlimit(resource.RLIMIT_AS)


NAIVE_TORCH = """
def budgeted_attention_torch(queries, keys, values, budget_mib, mask=None):
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    if mask is None:
        return torch.softmax(scores, dim=-1) @ values
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) * mask @ values
"""
NAIVE_TF = """
def budgeted_attention_tf(queries, keys, values, budget_mib, mask=None):
    scores = tf.matmul(queries, keys, transpose_b=True)
    scores = scores / math.sqrt(queries.shape[-1])
    if mask is None:
        return tf.nn.softmax(scores, axis=-1) @ values
    scores = tf.where(mask, scores, tf.constant(-1e9, scores.dtype))
    return tf.nn.softmax(scores, axis=-1) * tf.cast(mask, scores.dtype) @ values
"""


# ------------------------------------------------------------ the memory case
def test_the_direct_tables_exceed_the_cap_and_the_sandbox():
    n, h = runner.LENGTH, runner.HEADS
    one = n * n * 4  # ONE float32 (n, n) table of one head
    # larger than the whole address space: nothing set aside helps
    assert one > sandbox.Limits().memory
    assert one >= 8 * runner.HEADROOM  # 9 caps
    assert n * n * 2 > runner.HEADROOM  # nor one float16 table
    # the budget's chunk: its tables are a few MiB, far below what the call
    # may map, and the last chunk is shorter
    row = runner.one_row_bytes((1, h, n, 8), (1, h, n, 8), 4)
    chunk = int(runner.BUDGET_MIB * MiB) // row
    assert chunk * row <= runner.BUDGET_MIB * MiB <= runner.HEADROOM / 32
    assert 16 <= chunk < n and n % chunk != 0
    inputs = CASES["long"]
    assert "queries" not in inputs and "rows" not in inputs  # drawn, all rows
    # the reference's shape: test_grader_reference_for_the_memory_case_…


def test_ignoring_the_budget_fails_fast_and_cleanly():
    """In this process (no sandbox): no GBs allocated, the limit restored,
    the mistake named with the sizes, and the process still computes."""
    before = limits()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    for framework, code in (("torch", NAIVE_TORCH), ("tf", NAIVE_TF)):
        start = time.monotonic()
        with pytest.raises(GradingError, match=r"\(budget-ignored\)") as err:
            judge("memory", namespace(framework, extra=code), framework)
        assert time.monotonic() - start < 15
        assert "4.5 GiB" in str(err.value) and "8 MiB" in str(err.value)
        assert limits() == before
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    assert grown < 1.5 * 2**20, f"peak RSS grew by {grown / 2**20:.1f} GiB"
    assert float(torch.ones(1000, 1000).sum()) == 1e6
    # the same code is right on the small cases
    judge("values", namespace("torch", extra=NAIVE_TORCH))
    judge("values", namespace("tf", extra=NAIVE_TF), "tf")


def test_other_errors_in_the_memory_case_are_the_students_own():
    def budgeted_attention_torch(q, k, v, budget_mib, mask=None):
        raise KeyError("x")

    with pytest.raises(GradingError) as err:
        judge("memory", {"budgeted_attention_torch": budgeted_attention_torch})
    assert "budget-ignored" not in str(err.value) and "KeyError" in str(err.value)


@pytest.mark.slow
def test_grader_reference_for_the_memory_case_stays_small_and_counts_every_row():
    tracemalloc.start()
    try:
        start = time.monotonic()
        exp = task.expected("long", CASES["long"])
        seconds = time.monotonic() - start
        print(f"\ngrader's reference, memory case: {seconds:.1f} s")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 96 * MiB, f"{peak / MiB:.0f} MiB"
    EXPECTED["long"] = exp  # the later tests judge against it
    assert exp["outputs"].shape == (1, runner.HEADS, caps.MIXTURES, runner.HEAD_DIM)
    # about 5-10 s on 2 idle cores; the bound leaves room for a loaded machine
    assert seconds < 60, f"{seconds:.0f} s per student"
    assert task.CHECKS["memory"].variants == ()
    full = task.direct_long(CASES["long"])
    seed = CASES["long"]["seed"]
    assert checks._close(runner.mixed(full, seed)["outputs"], exp["outputs"], "outputs")
    for head, row in ((0, 0), (0, runner.LENGTH // 2), (0, runner.LENGTH - 1)):
        changed = full.copy()
        changed[0, head, row] = 0.0
        value = runner.mixed(changed, seed)["outputs"]
        assert not checks._close(value, exp["outputs"], "outputs"), (head, row)


@pytest.mark.slow
def test_honest_solution_passes_under_an_existing_tighter_limit():
    """Like a sandbox whose limit leaves less than HEADROOM: the chunks fit."""
    # the reference solution's memory case in both frameworks: also the
    # memory row of test_reference_passes_every_check_in_both_frameworks
    spaces = {f: namespace(f) for f in ("torch", "tf")}  # TF loaded before the cap
    expected("long")
    before = limits()
    tight = caps.mapped_bytes() + 256 * MiB
    resource.setrlimit(resource.RLIMIT_AS, (tight, before[1]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a grading kernel (one thread)
    try:
        for framework, ns in spaces.items():
            start = time.monotonic()
            judge("memory", ns, framework)
            print(f"\nhonest {framework} memory case: {time.monotonic() - start:.1f} s")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)
        torch.set_num_threads(threads)


SOME_ROWS = """
def budgeted_attention_torch(queries, keys, values, budget_mib, mask=None):
    # the whole table of 64 rows spread over the sequence, zeros elsewhere
    n = queries.shape[-2]
    rows = torch.arange(0, n, n // 64)
    s = queries[..., rows, :] @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    out = torch.zeros(*queries.shape[:-1], values.shape[-1])
    out[..., rows, :] = torch.softmax(s, dim=-1) @ values
    return out
"""


@pytest.mark.slow
def test_a_few_rows_computed_earn_nothing():
    with pytest.raises(GradingError, match="mismatch in outputs"):
        judge("memory", namespace(extra=SOME_ROWS))


# ------------------------------------------------------ the budget's edges
def test_every_boundary_budget_is_exact_in_binary():
    """Budgets of whole rows are floats holding the exact value: an honest
    float computation (budget_mib * 2**20 / row_bytes) gives the integer."""
    for case in ("chunk", "chunk_edges", "chunk_errors"):
        i = CASES[case]
        for q, k, item, budget in zip(
            task._shapes(i["q_shapes"]),
            task._shapes(i["k_shapes"]),
            i["itemsizes"].tolist(),
            i["budgets"].tolist(),
            strict=True,
        ):
            row = runner.one_row_bytes(q, k, item)
            ratio = Fraction(budget) * MiB / row
            assert budget * MiB / row == float(ratio)  # no rounding on the way
            if case == "chunk_edges":
                assert ratio.denominator in (1, 2)


def chunk_fn(message=None, value=None):
    honest = namespace("torch")["budget_chunk_torch"]

    def budget_chunk_torch(q, k, budget_mib):
        if message is not None and value is None:
            try:
                return honest(q, k, budget_mib)
            except ValueError:
                row = 2 * math.prod(q.shape[:-2]) * k.shape[-2] * q.element_size()
                raise ValueError(message(budget_mib, row)) from None
        if value is not None:
            return value(honest(q, k, budget_mib))
        return honest(q, k, budget_mib)

    return {"budget_chunk_torch": budget_chunk_torch}


@pytest.mark.parametrize(
    "message",
    [
        lambda b, row: f"budget {b} MiB < one row ({row / MiB} MiB)",
        lambda b, row: f"one row takes {row:,} bytes; budget_mib={b}",
        # the wording is not graded: a terse or padded message passes too
        lambda b, row: "budget too small",
        lambda b, row: "",
        lambda b, row: ", ".join(f"{x / 4:g}" for x in range(1, 150)),
    ],
)
def test_any_value_error_is_the_answer_whatever_it_says(message):
    judge("chunk", chunk_fn(message))


@pytest.mark.parametrize("kind", [AssertionError, RuntimeError, MemoryError])
def test_another_exception_where_nothing_fits_is_named(kind):
    honest = namespace("torch")["budget_chunk_torch"]

    def raising(q, k, budget_mib):
        if budget_mib * MiB < 2 * math.prod(q.shape[:-2]) * k.shape[-2] * 4:
            raise kind("budget too small")
        return honest(q, k, budget_mib)

    with pytest.raises(GradingError, match=r"\(wrong-exception\)") as err:
        judge("chunk", {"budget_chunk_torch": raising}, cases=("chunk_errors",))
    assert f"not {kind.__name__}" in str(err.value)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (math.inf, "returned inf, not a finite number"),
        (math.nan, "returned nan, not a finite number"),
        (1e30, "returned 1e[+]30, which is no number of query rows"),
        (np.float32("inf"), "not a finite number"),
        (torch.tensor(float("nan")), "not a finite number"),
    ],
)
def test_odd_numbers_of_rows_are_the_students_not_the_graders(value, match):
    ns = {"budget_chunk_torch": lambda q, k, b: value}
    with pytest.raises(GradingError, match=match) as err:
        judge("chunk", ns, cases=("chunk",))
    assert "budget_chunk_torch(queries" in str(err.value)

    def table_mib_torch(q, k, backward=False):
        return value

    if not math.isfinite(float(value)):
        with pytest.raises(GradingError, match="not a finite number"):
            judge("table", {"table_mib_torch": table_mib_torch}, cases=("table",))


class Unreadable:
    """A returned object whose shape (or itemsize) raises."""

    def __init__(self, out, broken="shape"):
        self.out, self.broken = out, broken

    @property
    def shape(self):
        if self.broken == "shape":
            raise RuntimeError("no shape for you")
        return self.out.shape

    def element_size(self):
        if self.broken == "element_size":
            raise RuntimeError("no size for you")
        return 10**30 if self.broken == "huge" else self.out.element_size()

    def detach(self):
        return self.out


@pytest.mark.parametrize(
    ("broken", "match"),
    [
        ("shape", r"reading the Unreadable that budgeted_attention_torch\("),
        ("element_size", "raised RuntimeError: no size for you"),
        ("huge", "whose elements take"),
    ],
)
def test_an_unreadable_returned_object_is_the_students(broken, match):
    honest = namespace("torch")["budgeted_attention_torch"]

    def budgeted_attention_torch(*args, **kwargs):
        return Unreadable(honest(*args, **kwargs), broken)

    with pytest.raises(GradingError, match=match):
        judge("values", {"budgeted_attention_torch": budgeted_attention_torch})


@pytest.mark.parametrize(
    "value",
    [float, np.int64, np.float32, torch.tensor, lambda r: torch.tensor(float(r))],
)
def test_a_whole_number_of_rows_in_any_form_is_accepted(value):
    judge("chunk", chunk_fn(value=value))


def test_a_fractional_number_of_rows_is_named():
    ns = chunk_fn(value=lambda r: r + 0.5)
    with pytest.raises(GradingError, match=r"\(chunk-not-an-integer\)"):
        judge("chunk", ns)


@pytest.mark.parametrize("wrap", [np.float64, float, "tf.constant"])
def test_table_results_in_any_scalar_form_are_accepted(wrap):
    import tensorflow as tf

    wrap = tf.constant if wrap == "tf.constant" else wrap
    honest = namespace("tf")["table_mib_tf"]

    def table_mib_tf(q, k, backward=False):
        return wrap(honest(q, k, backward))

    judge("table", {"table_mib_tf": table_mib_tf}, "tf")


def test_table_results_that_are_not_one_number_are_refused():
    def table_mib_tf(q, k, backward=False):
        return np.ones(2)

    with pytest.raises(GradingError, match="must return one number"):
        judge("table", {"table_mib_tf": table_mib_tf}, "tf")


# -------------------------------------------------------- honest variations
HONEST_TORCH = """
import attncourse.torch as atorch


def budget_chunk_torch(queries, keys, budget_mib):
    row_mib = 2 * math.prod(queries.shape[:-2]) * keys.shape[-2] * (
        queries.element_size()) / 2**20
    rows = math.floor(budget_mib / row_mib)
    if rows == 0:
        raise ValueError(f"{budget_mib} MiB < {row_mib:.3f} MiB (one row)")
    return min(rows, queries.shape[-2])


def budgeted_attention_torch(queries, keys, values, budget_mib, mask=None):
    chunk = budget_chunk_torch(queries, keys, budget_mib)
    n_q = queries.shape[-2]
    out = torch.empty(*queries.shape[:-1], values.shape[-1], dtype=queries.dtype)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], n_q, mask.shape[-1]) if (
            mask.dim() >= 2) else mask
    for start in range(0, n_q, chunk):
        q = queries[..., start:start + chunk, :]
        s = q @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
        m = None if mask is None else (
            mask[..., start:start + chunk, :] if mask.dim() >= 2 else mask)
        out[..., start:start + chunk, :] = atorch.masked_softmax(s, m) @ values
    return out
"""


@pytest.mark.slow
def test_honest_variations_pass_every_check():
    """The course's masked_softmax (allowed), sizes in float MiB floored, a
    preallocated output, the mask expanded to n_q rows first."""
    ns = namespace("torch", extra=HONEST_TORCH)
    for check in ("chunk", "values", "memory"):
        judge(check, ns)


@pytest.mark.slow
def test_reference_passes_every_check_in_both_frameworks():
    """Every check but the memory case, which the reference passes in both
    frameworks under a tighter limit: test_honest_solution_passes_under_…"""
    ns = namespace("tf", "torch")
    for framework in ("tf", "torch"):
        for check in task.CHECKS:
            if check != "memory":
                judge(check, ns, framework)


# ------------------------------------------------------------ probe, seeds
def test_runs_leave_what_the_probe_watches_unchanged():
    from grader.kernel.probe import Probe

    probe = Probe()
    ns = namespace("tf", "torch")
    for framework in ("tf", "torch"):
        for check in ("table", "chunk", "values"):
            judge(check, ns, framework)
    with pytest.raises(GradingError):
        judge("memory", namespace(extra=NAIVE_TORCH))
    assert probe.changes() == []


# ---------------------------------------------------------------- provenance
SETUP = [
    ("setup", "import attncourse\nimport numpy as np\nimport tensorflow as tf\n"),
    ("setup", "import torch\nimport math\n"),
]


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (
            "from attncourse.torch import scaled_dot_product_attention\n"
            "o, w = scaled_dot_product_attention(q, k, v)",
            "attncourse.torch.scaled_dot_product_attention",
        ),
        (
            "o, lse = attncourse.tf.flash_attention(q, k, v)",
            "attncourse.tf.flash_attention",
        ),
        (
            "from attncourse import benchmark\nm = benchmark.weights_mib(n)",
            "attncourse.benchmark",
        ),
        (
            "import torch.nn.functional as F\n"
            "o = F.scaled_dot_product_attention(q, k, v)",
            "torch.nn.functional.scaled_dot_product_attention",
        ),
        (
            "import keras\no = keras.ops.dot_product_attention(q, k, v)",
            "keras.ops.dot_product_attention",
        ),
        (
            "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))",
            "resource",
        ),
    ],
)
def test_library_and_builtin_attention_are_flagged(code, name):
    found = provenance.scan([("torch-solution", code)], task.FORBIDDEN, SETUP)
    assert any(name in note for note in found.calls), found


def test_honest_solutions_and_masked_softmax_are_not_flagged():
    cells = [(g, SOLUTIONS[g]) for g in ("tf-solution", "torch-solution")]
    cells.append(("torch-solution", HONEST_TORCH))
    found = provenance.scan(cells, task.FORBIDDEN, SETUP)
    assert not found.calls and not found.dynamic, found


# ------------------------------------- through the grading command, sandboxed
A = task.NAME
RAISES_ITS_LIMIT = """
import resource


def budgeted_attention_torch(queries, keys, values, budget_mib, mask=None):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))  # as far as allowed
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    if mask is None:
        return torch.softmax(scores, dim=-1) @ values
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) * mask @ values
"""
STUDENTS = {  # student -> (edits by part, TF points, PyTorch points)
    "reference": ({}, 6, 6),
    "ignores-budget": (
        {
            "tf-solution": ("chunk = budget_chunk_tf(", "chunk = queries.shape[-2]  #"),
            "torch-solution": (
                "chunk = budget_chunk_torch(",
                "chunk = queries.shape[-2]  #",
            ),
        },
        5,
        5,
    ),
    "raises-its-limit": ({"torch-solution": ("", RAISES_ITS_LIMIT)}, 6, 5),
}


def submission(edits: dict) -> dict:
    solutions = dict(SOLUTIONS)
    for gid, (old, new) in edits.items():
        if old:
            assert solutions[gid].count(old) == 1
            solutions[gid] = solutions[gid].replace(old, new)
        else:  # appended: redefines the function after the reference's
            solutions[gid] += "\n" + new
    return solutions


# graded in the session's whole-course run (support.course_batch); its
# reference student is the catalogue's
BATCH_ASSIGNMENTS = (A,)
BATCH_STUDENTS = {
    (A, student): submission(edits)
    for student, (edits, _, _) in STUDENTS.items()
    if student != "reference"
}


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("student", STUDENTS)
def test_sandboxed_scores(course_batch, student):
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")
    assert course_batch["run"].code == 0, course_batch["run"].tail(6000)
    _, tf_points, torch_points = STUDENTS[student]
    row = course_batch["rows"][A, student]
    got = (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"])
    assert got == (tf_points, torch_points), (row["notes"], row.get("cells"))
    if student == "reference":
        assert not row["flags"], row["notes"]


def test_budgets_in_messages_are_exact_and_never_read_as_reference_numbers():
    """A budget printed with five decimals (0.53112) was within 1e-4 of a
    random reference output: the leak scan withheld an honest blank
    submission's feedback (CI). Budgets are whole bytes: they are shown as
    bytes over 2**20, exactly, and without a long decimal."""
    from grader import leaks

    budgets = set()
    for seed in range(7000, 7010):  # inputs as fresh draws make them
        for inputs in task.make_cases(seed).values():
            for key, value in inputs.items():
                if key.startswith("budget"):
                    budgets |= {float(b) for b in np.ravel(value)}
    assert len(budgets) > 20
    for budget in budgets:
        arg, text = runner.budget_arg(budget), runner.budget_text(budget)
        assert eval(arg) == budget, arg  # what the learner can paste
        assert not leaks.numbers_in(f"{arg} {text}").size, (arg, text)
    assert runner.budget_arg(556927 / 2**20) == "556927 / 2**20"
    assert runner.budget_text(2.0) == "2 MiB"
