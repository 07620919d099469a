"""sparse-linear-attention: the memory cases, the reference, honest variety.

* the memory cases: one (n, n) float32 table of each is larger than the
  sandbox's whole address space and than the runner's cap, and so are the
  (n, d, d_v) cumulative states of the linear case; a materialising solution
  fails fast, is named (``materialised-scores`` / ``materialised-states``),
  also the chapter's band in TensorFlow (tf.signal.frame copies the keys),
  the limit is restored and the process still computes; the honest blocked
  and chunked solutions pass with a margin, also under a tighter limit;
* the grader's reference: float64, never the table nor the states, every row
  counted through signed sums; the rows the kernel could guess earn nothing;
* honest variety is not accused: a band of strided views, per-chunk states
  kept, elu(x) + 1 written with the framework's elu, another chunk size;
* shapes with a known cause are named, and so is the first block's negative
  slice start (an empty key axis), without the generic shape advice; the
  probe sees nothing changed; fresh
  draws keep every mistake distinguishable;
* the library's own sliding-window and linear attention (the ``sparse``
  module, its feature map) and the frameworks' attention are flagged, the
  honest solution and the frameworks' elu are not;
* end to end: the whole-course run of ``test_exercises_grading`` (the real
  ``python -m grader grade`` in the sandbox) gives the reference full marks,
  the release 0, and the catalogue's bug1..bug3 lose exactly their cells.
"""

import math
import resource
import time
import tracemalloc

import numpy as np
import pytest
import torch
from support.grading import student_solutions

import attncourse  # noqa: F401  (quiet TF first)
from grader import checks, provenance, sandbox
from grader.assignments import sparse_linear_attention as task
from grader.checks import ATOL, verdict
from grader.kernel.errors import GradingError
from grader.kernel.runners import sparse_linear_attention as runner
from grader.kernel.runners.flash_attention import mapped_bytes

CASES = task.make_cases()
SOLUTIONS = student_solutions(task.NAME, "reference")


def namespace(*parts, extra="") -> dict:
    """The reference solution's cells (``parts``), executed here."""
    ns = {"tf": __import__("tensorflow"), "torch": torch, "np": np, "math": math}
    for part in parts:
        exec(SOLUTIONS[f"{part}-solution"], ns)
    exec(extra, ns)
    return ns


def judge(check: str, ns: dict, framework="torch", cases=None) -> dict:
    c = task.CHECKS[check]
    seen = {}
    for case in cases or c.cases:
        inputs = CASES[case]
        observed = c.run(framework, ns, inputs)
        expected = task.expected(case, inputs)
        verdict(c, framework, case, inputs, expected, observed)
        seen[case] = (observed, expected)
    return seen


def limits():
    return resource.getrlimit(resource.RLIMIT_AS)


NAIVE_WINDOW = """
def window_attention_torch(queries, keys, values, window):
    n = queries.shape[1]
    s = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    s = s.masked_fill(~((j <= i) & (j > i - window)), -math.inf)
    return torch.softmax(s, dim=-1) @ values
"""
CUMSUM_LINEAR_TF = """
def chunked_linear_attention_tf(queries, keys, values, chunk):
    fq = tf.where(queries > 0, queries + 1.0, tf.exp(tf.minimum(queries, 0.0)))
    fk = tf.where(keys > 0, keys + 1.0, tf.exp(tf.minimum(keys, 0.0)))
    states = tf.cumsum(fk[..., :, None] * values[..., None, :], axis=1)
    norms = tf.cumsum(fk, axis=1)
    numerator = tf.einsum("bnr,bnre->bne", fq, states)
    return numerator / (tf.reduce_sum(fq * norms, -1)[..., None] + 1e-6)
"""


# ------------------------------------------------------------ the memory cases
@pytest.mark.slow
def test_tables_and_states_exceed_the_cap_and_the_sandbox():
    box, cap = sandbox.Limits().memory, runner.HEADROOM
    for n in (runner.WINDOW_LENGTH, runner.LINEAR_LENGTH):
        assert n * n * 4 > 2 * box and n * n * 4 > 8 * cap  # float32 scores
        assert n * n > 2 * cap  # an (n, n) bool mask does not fit either
    n, r = runner.LINEAR_LENGTH, runner.LINEAR_DIM
    assert n * r * r * 4 > box and n * r * r * 4 > 4 * cap  # the cumsum states
    # the honest working sets: a (window, 2 window) block, a (chunk, chunk)
    # table and one (d, d_v) state are a few MiB
    assert 2 * runner.WINDOW**2 * 8 < 4 * 2**20
    assert (runner.CHUNK**2 + r * r) * 8 < 4 * 2**20
    for case in task.LONG:
        inputs = CASES[case]
        assert "queries" not in inputs and "rows" not in inputs
        exp = task.expected(case, inputs)["outputs"]
        assert exp.shape == (1, runner.MIXTURES, int(inputs["head_dim"]))


def test_materialising_window_fails_fast_and_cleanly():
    """In this process (no sandbox): no GBs allocated, the limit restored,
    the mistake named, the process still computes, the small check passes."""
    before = limits()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    start = time.monotonic()
    with pytest.raises(GradingError, match=r"\(materialised-scores\)") as err:
        judge("window_memory", namespace(extra=NAIVE_WINDOW))
    assert time.monotonic() - start < 10
    assert "8.9 GiB" in str(err.value)
    assert limits() == before
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    assert grown < 1.5 * 2**20, f"peak RSS grew by {grown / 2**20:.1f} GiB"
    assert float(torch.ones(1000, 1000).sum()) == 1e6
    judge("window", namespace(extra=NAIVE_WINDOW))


COPIED_BAND_TF = """
def window_attention_tf(queries, keys, values, window):
    # the chapter's band: right numbers, but tf.signal.frame copies the keys
    b, n, d = queries.shape
    pad = [[0, 0], [window - 1, 0], [0, 0]]
    k = tf.signal.frame(tf.pad(keys, pad), window, 1, axis=-2)  # (b, n, w, d)
    v = tf.signal.frame(tf.pad(values, pad), window, 1, axis=-2)
    s = tf.einsum("bnd,bnwd->bnw", queries, k) / math.sqrt(d)
    slot = np.arange(n)[:, None] - window + 1 + np.arange(window)
    s = tf.where(slot >= 0, s, -np.inf)
    return tf.einsum("bnw,bnwd->bnd", tf.nn.softmax(s, axis=-1), v)
"""


def test_copied_band_in_tensorflow_is_named_for_what_it_is():
    """The chapter's band is a view in NumPy and PyTorch, a copy in TF: the
    message must cover a band of copied keys, not only an (n, n) table."""
    ns = namespace(extra=COPIED_BAND_TF)
    judge("window", ns, framework="tf")  # right numbers on small inputs
    before = limits()
    with pytest.raises(GradingError, match=r"\(materialised-scores\)") as err:
        judge("window_memory", ns, framework="tf")
    text = str(err.value)
    assert "band of copied keys (49000, 384, 32) 2.2 GiB" in text
    assert "(n, window, d) band of copied keys" in text
    assert limits() == before


def test_negative_slice_start_is_named_without_the_generic_advice():
    """keys[:, start - window:stop] at start 0: an empty key axis; PyTorch's
    message (TensorFlow's is the catalogue's bug10)."""
    ns = namespace(
        "torch",
        extra=SOLUTIONS["torch-solution"].replace(
            "first = max(0, start - window)", "first = start - window"
        ),
    )
    for check in ("window", "window_memory"):
        with pytest.raises(GradingError, match=r"\(negative-slice-start\)") as err:
            judge(check, ns)
        assert "What this usually means" not in str(err.value)
        assert "Where (your code last)" in str(err.value)
    # an unrelated error keeps the generic advice
    bad = {"window_attention_torch": lambda q, k, v, w: q @ k}
    with pytest.raises(GradingError) as err:
        judge("window", bad)
    assert "negative-slice-start" not in str(err.value)


def test_cumulative_states_fail_the_linear_memory_case_in_tensorflow():
    before = limits()
    ns = namespace(extra=CUMSUM_LINEAR_TF)
    with pytest.raises(GradingError, match=r"\(materialised-states\)") as err:
        judge("linear_memory", ns, framework="tf")
    assert "cumulative states (73700, 128, 128) 4.5 GiB" in str(err.value)
    assert limits() == before
    judge("linear", ns, framework="tf")  # right numbers on small inputs


def test_other_errors_in_a_memory_case_are_the_students_own():
    ns = {"window_attention_torch": lambda *a: (_ for _ in ()).throw(KeyError("x"))}
    with pytest.raises(GradingError) as err:
        judge("window_memory", ns)
    assert "materialised" not in str(err.value) and "KeyError" in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_honest_solutions_pass_the_memory_cases_with_a_margin(framework):
    """Under an existing limit tighter than the cap (like a sandbox that
    leaves less room); the float32 results are well inside the tolerance."""
    ns = namespace(framework)
    before = limits()
    try:
        for check in ("window_memory", "linear_memory"):
            tight = mapped_bytes() + 512 * 2**20  # the inputs' draws included
            resource.setrlimit(resource.RLIMIT_AS, (tight, before[1]))
            start = time.monotonic()
            seen = judge(check, ns, framework)
            seconds = time.monotonic() - start
            resource.setrlimit(resource.RLIMIT_AS, before)
            ((observed, expected),) = seen.values()
            gap = np.abs(observed["outputs"] - expected["outputs"]).max()
            print(f"\n{framework} {check}: {seconds:.1f} s, largest gap {gap:.1e}")
            assert gap < ATOL / 4, gap
            assert seconds < 30
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


# ------------------------------------------------------- the grader's reference
@pytest.mark.slow
def test_grader_reference_for_the_long_cases_stays_small():
    """Float64, never the (n, n) table nor the (n, d, d_v) states: beyond the
    inputs and their features, a few blocks; every row counts."""
    for case in task.LONG:
        inputs = CASES[case]
        n, d = int(inputs["length"]), int(inputs["head_dim"])
        arrays = 4 * n * d * 8  # queries, keys, values, one temporary
        tracemalloc.start()
        try:
            start = time.monotonic()
            task.expected(case, inputs)
            seconds = time.monotonic() - start
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < arrays + 64 * 2**20, f"{case}: {peak / 2**20:.0f} MiB"
        if case == "linear_long":  # far from the (n, d, d) states, float64
            assert peak < n * d * d * 8 / 16
        assert seconds < 20, f"{case}: {seconds:.0f} s per student"
        assert task.CHECKS[f"{case.split('_')[0]}_memory"].variants == ()
    # every row counts: one row changed shows in the signed sums
    inputs = CASES["window_long"]
    full = task.window_dense(inputs)["outputs"]
    want = task.expected("window_long", inputs)["outputs"]
    assert checks._close(runner.mixed(full, inputs["seed"])["outputs"], want, "outputs")
    for row in (0, runner.WINDOW_LENGTH // 2, runner.WINDOW_LENGTH - 1):
        changed = full.copy()
        changed[0, row] = 0.0
        got = runner.mixed(changed, inputs["seed"])["outputs"]
        assert not checks._close(got, want, "outputs"), row


def test_references_agree_with_the_definitions_written_as_loops():
    """Both references against their definitions, one query at a time
    (independent of the blocks and chunks), on the small cases."""
    for case in ("uneven", "window_one", "wide", "exact", "window_n"):
        i = CASES[case]
        q, k, v, w = i["queries"], i["keys"], i["values"], int(i["window"])
        got = task.expected(case, i)["outputs"]
        for t in range(q.shape[1]):
            lo = max(0, t - w + 1)
            s = np.einsum("bd,bjd->bj", q[:, t], k[:, lo : t + 1]) / math.sqrt(
                q.shape[-1]
            )
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            np.testing.assert_allclose(
                got[:, t], np.einsum("bj,bje->be", p, v[:, lo : t + 1]), atol=1e-12
            )
    for case in ("chunks", "chunks_even", "chunk_one", "one_chunk"):
        i = CASES[case]
        fq, fk = (task.elu_plus_one(i[n]) for n in ("queries", "keys"))
        got = task.expected(case, i)["outputs"]
        state, norm = 0.0, 0.0
        for t in range(fq.shape[1]):  # the recurrence, token by token
            state = state + fk[:, t, :, None] * i["values"][:, t, None, :]
            norm = norm + fk[:, t]
            num = np.einsum("br,bre->be", fq[:, t], state)
            den = np.einsum("br,br->b", fq[:, t], norm)
            np.testing.assert_allclose(got[:, t], num / (den[:, None] + task.EPS))


GUESSED_ROWS = """
def window_attention_torch(queries, keys, values, window):
    # a naive solution on a few rows only (every 1000th), zeros elsewhere
    n = queries.shape[1]
    rows = torch.arange(0, n, 1000)
    out = torch.zeros(queries.shape[0], n, values.shape[-1])
    s = queries[:, rows] @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    j = torch.arange(n)[None, :]
    s = s.masked_fill(~((j <= rows[:, None]) & (j > rows[:, None] - window)),
                      -math.inf)
    out[:, rows] = torch.softmax(s, dim=-1) @ values
    return out
"""


def test_rows_the_kernel_could_guess_earn_nothing():
    with pytest.raises(GradingError, match="mismatch in outputs"):
        judge("window_memory", namespace(extra=GUESSED_ROWS))


# ---------------------------------------------------------------- honest variety
BAND = """
def window_attention_torch(queries, keys, values, window):
    # the chapter's band: keys padded in front, viewed (n, window) per query
    b, n, d = queries.shape
    pad = queries.new_zeros(b, window - 1, d)
    k = torch.cat([pad, keys], 1).unfold(1, window, 1)  # (b, n, d, window)
    v = torch.cat([values.new_zeros(b, window - 1, values.shape[-1]), values], 1)
    v = v.unfold(1, window, 1)  # (b, n, d_v, window)
    s = torch.einsum("bnd,bndw->bnw", queries, k) / math.sqrt(d)
    slot = torch.arange(n)[:, None] - window + 1 + torch.arange(window)
    s = s.masked_fill(slot < 0, -math.inf)
    return torch.einsum("bnw,bnew->bne", torch.softmax(s, -1), v)
"""
PER_CHUNK_STATES = """
def chunked_linear_attention_torch(queries, keys, values, chunk):
    # states of every chunk boundary kept (n / chunk of them), F.elu + 1,
    # and a chunk size of its own: all fine
    chunk = 100
    fq = torch.nn.functional.elu(queries) + 1
    fk = torch.nn.functional.elu(keys) + 1
    b, n, r = fq.shape
    states = [fq.new_zeros(b, r, values.shape[-1])]
    norms = [fq.new_zeros(b, r)]
    out = []
    for s in range(0, n, chunk):
        q, k, v = fq[:, s:s + chunk], fk[:, s:s + chunk], values[:, s:s + chunk]
        a = torch.tril(q @ k.transpose(1, 2))
        num = q @ states[-1] + a @ v
        den = torch.einsum("bcr,br->bc", q, norms[-1]) + a.sum(-1)
        out.append(num / (den[..., None] + 1e-6))
        states.append(states[-1] + k.transpose(1, 2) @ v)
        norms.append(norms[-1] + k.sum(1))
    return torch.cat(out, 1)
"""


@pytest.mark.slow
def test_honest_alternatives_pass():
    judge("window", namespace(extra=BAND))
    judge("window_memory", namespace(extra=BAND))
    judge("linear", namespace(extra=PER_CHUNK_STATES))
    judge("linear_memory", namespace(extra=PER_CHUNK_STATES))


def test_shapes_with_a_known_cause_are_named():
    ns = namespace("torch")
    honest = ns["window_attention_torch"]

    def last_block_dropped(q, k, v, window):
        n = q.shape[1] // window * window
        return honest(q[:, :n], k[:, :n], v[:, :n], window)

    def transposed(q, k, v, window):
        return honest(q, k, v, window).transpose(0, 1)

    for fn, tag in ((last_block_dropped, "rows-dropped"), (transposed, None)):
        with pytest.raises(GradingError, match="outputs have shape") as err:
            judge("window", {"window_attention_torch": fn})
        if tag:
            assert f"({tag})" in str(err.value)


def test_tuple_returned_is_refused_plainly():
    ns = namespace("torch")
    honest = ns["chunked_linear_attention_torch"]
    ns = {"chunked_linear_attention_torch": lambda *a: (honest(*a), None)}
    with pytest.raises(GradingError, match="should return a single tensor"):
        judge("linear", ns)


# ------------------------------------------------------------ probe, seeds
def test_runs_leave_what_the_probe_watches_unchanged():
    from grader.kernel.probe import Probe

    probe = Probe()
    ns = namespace("tf", "torch")
    for framework in ("tf", "torch"):
        for check in ("window", "linear"):
            judge(check, ns, framework)
    with pytest.raises(GradingError):
        judge("window_memory", namespace(extra=NAIVE_WINDOW))
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
            "from attncourse.torch import sliding_window_attention\n"
            "o, _ = sliding_window_attention(q, k, v, 4)",
            "attncourse.torch.sliding_window_attention",
        ),
        (
            "o = attncourse.tf.linear_attention(q, k, v, causal=True)",
            "attncourse.tf.linear_attention",
        ),
        (
            "o = attncourse.torch.linear_attention_step(None, None, q, k, v)",
            "attncourse.torch.linear_attention_step",
        ),
        ("f = attncourse.tf.elu_feature_map(q)", "attncourse.tf.elu_feature_map"),
        ("m = attncourse.numpy.sliding_window_mask(8, 2)", "sliding_window_mask"),
        ("b = attncourse.torch.sparse.key_band(k, 4, True)", "attncourse.torch.sparse"),
        ("w = attncourse.tf.masked_softmax(s, m)", "attncourse.tf.masked_softmax"),
        (
            "import torch.nn.functional as F\n"
            "o = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            "torch.nn.functional.scaled_dot_product_attention",
        ),
        (
            "import keras\no = keras.ops.dot_product_attention(q, k, v)",
            "keras.ops.dot_product_attention",
        ),
    ],
)
def test_library_and_builtin_attention_are_flagged(code, name):
    found = provenance.scan([("torch-solution", code)], task.FORBIDDEN, SETUP)
    assert any(name in note for note in found.calls), found


def test_honest_solution_and_the_frameworks_elu_are_clean():
    cells = [(g, SOLUTIONS[g]) for g in ("tf-solution", "torch-solution")]
    cells += [
        ("torch-solution", "f = torch.nn.functional.elu(x) + 1"),
        ("tf-solution", "f = tf.nn.elu(x) + 1\na = tf.linalg.band_part(s, -1, 0)"),
    ]
    found = provenance.scan(cells, task.FORBIDDEN, SETUP)
    assert not found.calls and not found.dynamic, found


# End to end in the sandbox: the whole-course run of test_exercises_grading
# grades this assignment's reference, blank release and bug1..bug3 (its memory
# cases under the sandbox's own address-space limit) and asserts each score.
