"""flash-attention: the memory case, the skip case and the backward's checks.

* the memory case: one (n, n) float32 table of its length is larger than the
  sandbox's whole address space and than the cap the runner sets; the runner
  caps RLIMIT_AS around the call (also without a sandbox: a materialising
  solution fails in a fraction of a second instead of allocating GBs here),
  restores it, names the mistake, and leaves the process usable; an honest
  solution passes under an existing tighter limit too; the grader computes
  its reference for the checked rows only;
* the skip case: NaN keys and values that only skipped tiles would read --
  the honest solution is unaffected, code that computes and masks those tiles
  is named (and a NaN for another reason is not blamed on skipping);
* PyTorch's backward: FlashAttentionTorch must be an autograd.Function whose
  backward produced the gradients, and must not keep the (n_q, n_k) weights;
* nothing here changes what the kernel's probe fingerprints;
* the library's and the frameworks' attention are flagged (``FORBIDDEN``),
  the honest solution is not.
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
from grader.assignments import flash_attention as task
from grader.checks import verdict
from grader.kernel.errors import GradingError
from grader.kernel.runners import flash_attention as runner

CASES = task.make_cases()
SOLUTIONS = student_solutions(task.NAME, "reference")


def namespace(*parts, extra="") -> dict:
    """The reference solution's cells (``parts``), executed here."""
    ns = {"tf": __import__("tensorflow"), "torch": torch, "np": np, "math": math}
    for part in parts:
        exec(SOLUTIONS[f"{part}-solution"], ns)
    exec(extra, ns)
    return ns


def judge(check: str, ns: dict, framework="torch", cases=None) -> None:
    c = task.CHECKS[check]
    for case in cases or c.cases:
        inputs = CASES[case]
        observed = c.run(framework, ns, inputs, gradients=c.runner.gradients)
        verdict(c, framework, case, inputs, task.expected(case, inputs), observed)


NAIVE = """
def flash_attention_torch(queries, keys, values, causal=False, block_q=64,
                          block_k=64):
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    if causal:
        hidden = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(hidden, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    return torch.exp(scores - lse[..., None]) @ values, lse
"""


# ------------------------------------------------------------ the memory case
def test_one_table_exceeds_the_cap_and_the_sandbox():
    n = runner.LENGTH
    assert n * n * 4 > sandbox.Limits().memory  # even a raised soft limit fails
    assert n * n * 4 > 4 * runner.HEADROOM
    # a float16 table or an (n, n) bool mask does not fit in the cap either
    assert n * n * 1 > runner.HEADROOM
    inputs = CASES["long"]
    assert "queries" not in inputs
    # the kernel is never told which rows count: every row is checked
    assert "rows" not in inputs
    expected = task.expected("long", inputs)  # signed sums of every row
    assert expected["outputs"].shape == (1, runner.MIXTURES, runner.HEAD_DIM)
    assert expected["logsumexp"].shape == (1, runner.MIXTURES)


def limits():
    return resource.getrlimit(resource.RLIMIT_AS)


def test_cap_lowers_the_soft_limit_and_restores_it():
    before = limits()
    used = runner.mapped_bytes()
    assert used and used > 100 * 2**20
    with runner.address_space_cap() as allowed:
        soft, hard = limits()
        assert hard == before[1]
        assert used + runner.HEADROOM - 2**26 <= soft <= used + runner.HEADROOM + 2**26
        assert abs(allowed - runner.HEADROOM) < 2**26
        with pytest.raises(MemoryError):
            np.ones((runner.LENGTH, runner.LENGTH), np.float32)
    assert limits() == before
    # an exception inside restores it as well
    with pytest.raises(ZeroDivisionError), runner.address_space_cap():
        raise ZeroDivisionError
    assert limits() == before


def test_a_limit_raised_inside_the_call_is_refused_and_restored():
    """A solution that lifts the memory case's soft limit back to the hard one
    (to build the table after all) fails the case, named; the limit is put
    back. (The provenance scan flags resource.setrlimit / prlimit as well.)"""
    before = limits()
    with (
        pytest.raises(GradingError, match="memory limit of this case was changed"),
        runner.address_space_cap(),
    ):
        resource.setrlimit(resource.RLIMIT_AS, before)
    assert limits() == before
    assert {"resource.setrlimit", "resource.prlimit"} <= set(task.FORBIDDEN)


def test_cap_never_raises_a_tighter_limit():
    before = limits()
    tight = runner.mapped_bytes() + runner.HEADROOM // 2
    resource.setrlimit(resource.RLIMIT_AS, (tight, before[1]))
    try:
        with runner.address_space_cap():
            assert limits()[0] == tight
        assert limits()[0] == tight
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


def test_materialising_solution_fails_the_memory_case_fast_and_cleanly():
    """In this process (no sandbox): no GBs allocated, the limit restored,
    the mistake named, and the process still computes."""
    before = limits()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    start = time.monotonic()
    with pytest.raises(GradingError, match=r"\(materialised-weights\)") as err:
        judge("memory", namespace(extra=NAIVE))
    assert time.monotonic() - start < 10
    assert "4.5 GiB" in str(err.value)
    assert limits() == before
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    assert grown < 1.5 * 2**20, f"peak RSS grew by {grown / 2**20:.1f} GiB"
    assert float(torch.ones(1000, 1000).sum()) == 1e6
    # the same code passes the small checks
    judge("forward", namespace(extra=NAIVE))
    judge("gradients", namespace("torch", extra=NAIVE))


def test_tensorflow_out_of_memory_is_named_too():
    import tensorflow as tf

    def flash_attention_tf(queries, keys, values, causal, block_q, block_k):
        scores = tf.matmul(queries, keys, transpose_b=True)  # (1, n, n)
        return scores, scores[..., 0]

    before = limits()
    with pytest.raises(GradingError, match=r"\(materialised-weights\)"):
        judge("memory", {"flash_attention_tf": flash_attention_tf}, framework="tf")
    assert limits() == before


def test_other_errors_in_the_memory_case_are_the_students_own():
    ns = {"flash_attention_torch": lambda *a: (_ for _ in ()).throw(KeyError("x"))}
    with pytest.raises(GradingError) as err:
        judge("memory", ns)
    assert "materialised" not in str(err.value) and "KeyError" in str(err.value)


@pytest.mark.slow
def test_honest_solution_passes_under_an_existing_tighter_limit():
    """Like a sandbox whose limit leaves less than HEADROOM: the tiles fit."""
    before = limits()
    tight = runner.mapped_bytes() + 512 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (tight, before[1]))
    try:
        start = time.monotonic()
        judge("memory", namespace("torch"))
        print(f"\nhonest torch memory case: {time.monotonic() - start:.1f} s")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


@pytest.mark.slow
def test_grader_reference_for_the_long_case_stays_small():
    """The grader never builds the (n, n) table: every row, a chunk of rows
    at a time; no known mistake is recomputed on all rows (per student)."""
    tracemalloc.start()
    try:
        inputs = task.make_cases()["long"]
        start = time.monotonic()
        expected = task.expected("long", inputs)
        seconds = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert seconds < 30, f"{seconds:.0f} s per student"
    assert task.CHECKS["memory"].variants == ()
    # every row counts: one row left out (zeros) shows in the signed sums
    full = task.direct(inputs)
    assert full["outputs"].shape == (1, runner.LENGTH, runner.HEAD_DIM)
    for key, value in runner.mixed(full, inputs["seed"]).items():
        assert checks._close(value, expected[key], key)
    for row in (0, runner.LENGTH // 2, runner.LENGTH - 1):
        for key in task.COMPARE:
            changed = {k: v.copy() for k, v in full.items()}
            changed[key][0, row] = 0.0
            value = runner.mixed(changed, inputs["seed"])[key]
            assert not checks._close(value, expected[key], key), (row, key)
    # some rows, computed another way: the tiled algorithm on those rows
    sub = {**inputs, "rows": task.long_rows(inputs)}
    want = task.direct(sub)
    for key, value in task.tiled(sub).items():
        np.testing.assert_allclose(value, want[key], atol=1e-10)


ROWS_FROM_THE_RUNNER = """
import sys

def flash_attention_torch(queries, keys, values, causal=False, block_q=64,
                          block_k=64):
    # the rows the grader checks, if the kernel knows them (its frames, its
    # inputs): the whole table of those rows only, zeros elsewhere
    frame, rows = sys._getframe(1), None
    while frame is not None and rows is None:
        found = frame.f_locals.get("inputs")
        if isinstance(found, dict) and "rows" in found:
            rows = torch.as_tensor(np.asarray(found["rows"]))
        frame = frame.f_back
    n = queries.shape[1]
    if rows is None:  # a guess: 24 rows
        rows = torch.arange(0, n, max(1, n // 24))
    out = torch.zeros(queries.shape[0], n, values.shape[-1])
    lse = torch.zeros(queries.shape[0], n)
    s = queries[:, rows] @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    s = s.masked_fill(torch.arange(keys.shape[1])[None, :] > rows[:, None],
                      -math.inf)
    lse[:, rows] = torch.logsumexp(s, dim=-1)
    out[:, rows] = torch.exp(s - lse[:, rows, None]) @ values
    return out, lse
"""


def test_rows_the_kernel_could_predict_earn_nothing():
    """A naive solution that computes only the rows the grader checks (read
    from the runner's frame or the inputs file) must not pass: the kernel is
    not told any rows, and every row is compared."""
    with pytest.raises(GradingError, match="mismatch|logsumexp|outputs"):
        judge("memory", namespace(extra=ROWS_FROM_THE_RUNNER))


# --------------------------------------------------------------- the skip case
def test_skip_case_poisons_only_what_skipped_tiles_read():
    inputs = CASES["skip"]
    rows, start = int(inputs["checked_rows"]), int(inputs["poison_from"])
    block_q, block_k = int(inputs["block_q"]), int(inputs["block_k"])
    assert rows == start == task.POISON
    assert rows % block_q == 0 and start % block_k == 0  # a block ends, a tile starts
    assert all(np.isfinite(inputs[k]).all() for k in runner.SOURCES)  # as stored
    assert all(np.isfinite(v).all() for v in task.expected("skip", inputs).values())
    ns = namespace("tf", "torch")
    seen = []

    def spy(queries, keys, values, causal, block_q, block_k):
        k, v = keys.numpy(), values.numpy()
        seen.append((np.isnan(k[:, start:]).all(), np.isfinite(k[:, :start]).all()))
        seen.append((np.isnan(v[:, start:]).all(), np.isfinite(v[:, :start]).all()))
        return ns["flash_attention_torch"](
            queries, keys, values, causal, block_q, block_k
        )

    judge("causal", {"flash_attention_torch": spy}, cases=("skip",))
    assert seen == [(True, True)] * 2  # one call: the honest rows are finite
    for framework in ("tf", "torch"):
        judge("causal", ns, framework, cases=("skip",))


def test_computing_every_tile_is_named_and_other_nan_is_not():
    """The whole table (every tile computed, masked) reads the NaN keys and
    values; the tiled version that does the same is the catalogue's bug3."""
    with pytest.raises(GradingError, match=r"\(causal-tiles-not-skipped\)"):
        judge("causal", namespace(extra=NAIVE))
    honest = namespace("torch")["flash_attention_torch"]

    def always_nan(queries, keys, values, causal, block_q, block_k):
        out, lse = honest(queries, keys, values, causal, block_q, block_k)
        return out * math.nan, lse

    with pytest.raises(GradingError) as err:
        judge("causal", {"flash_attention_torch": always_nan}, cases=("skip",))
    assert "not-skipped" not in str(err.value) and "NaN" in str(err.value)


# ------------------------------------------------------ the PyTorch backward
SAVES_WEIGHTS = """
class FlashAttentionTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, keys, values, causal=False, block_q=64, block_k=64):
        outputs, lse = flash_attention_torch(queries, keys, values, causal,
                                             block_q, block_k)
        s = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
        ctx.weights = torch.exp(s - lse[..., None])
        ctx.save_for_backward(values)
        return outputs

    @staticmethod
    def backward(ctx, grad_outputs):
        grad_values = ctx.weights.transpose(-1, -2) @ grad_outputs
        return None, None, grad_values, None, None, None
"""


def test_function_that_keeps_the_weights_is_named():
    ns = namespace("torch")
    exec(SAVES_WEIGHTS, ns)
    with pytest.raises(GradingError, match=r"\(saves-weights\)"):
        judge("gradients", ns)


KEEPS = """
CACHE = {}


class FlashAttentionTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, keys, values, causal=False, block_q=64, block_k=64):
        outputs, lse = flash_attention_torch(queries, keys, values, causal,
                                             block_q, block_k)
        s = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
        if causal:
            hidden = torch.ones(s.shape[-2:], dtype=torch.bool).triu(1)
            s = s.masked_fill(hidden, -math.inf)
        W = torch.exp(s - lse[..., None])
        STORE
        ctx.save_for_backward(queries, keys, values, outputs)
        return outputs

    @staticmethod
    def backward(ctx, grad_outputs):
        q, k, v, o = ctx.saved_tensors
        P = LOAD
        scale = 1 / math.sqrt(q.shape[-1])
        ds = P * (grad_outputs @ v.transpose(-1, -2)
                  - (grad_outputs * o).sum(-1, keepdim=True))
        return (ds @ k * scale, ds.transpose(-1, -2) @ q * scale,
                P.transpose(-1, -2) @ grad_outputs, None, None, None)
"""
DISGUISES = {
    "a list on ctx": ("ctx.w = [W]", "ctx.w[0]"),
    "a dict on ctx": ("ctx.w = {'w': W}", "ctx.w['w']"),
    "a NumPy array": ("ctx.w = W.numpy()", "torch.from_numpy(ctx.w)"),
    "bytes": (
        "ctx.w = (W.numpy().tobytes(), W.shape)",
        "torch.frombuffer(bytearray(ctx.w[0]), dtype=torch.float32).reshape(ctx.w[1])",
    ),
    "a closure": ("ctx.w = (lambda W=W: W)", "ctx.w()"),
    "an object": (
        "ctx.w = type('Box', (), {})(); ctx.w.t = W",
        "ctx.w.t",
    ),
    "tiles, copied": (
        "ctx.w = [t.clone() for t in W.split(4, dim=-1)]",
        "torch.cat(ctx.w, -1)",
    ),
    "a flat view": ("ctx.save_for_backward(W.reshape(-1)[:1])", "None"),
    "a global": ("CACHE['w'] = W", "CACHE['w']"),
    "a class attribute": ("FlashAttentionTorch.w = W", "FlashAttentionTorch.w"),
}


@pytest.mark.parametrize("how", DISGUISES)
def test_weights_kept_in_disguise_are_named(how):
    store, load = DISGUISES[how]
    ns = namespace("torch")
    code = KEEPS.replace("STORE", store).replace("LOAD", load)
    if how == "a flat view":  # the view keeps the table's storage alive
        code = code.replace(
            "        ctx.save_for_backward(queries, keys, values, outputs)\n", ""
        ).replace("q, k, v, o = ctx.saved_tensors", "return (None,) * 6")
    exec(code, ns)
    with pytest.raises(GradingError, match=r"\(saves-weights\)"):
        judge("gradients", ns)


AUTOGRAD_BACKWARD = """
class FlashAttentionTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, keys, values, causal=False, block_q=64, block_k=64):
        outputs, _ = flash_attention_torch(queries, keys, values, causal,
                                           block_q, block_k)
        ctx.save_for_backward(queries, keys, values)
        ctx.causal = causal
        return outputs

    @staticmethod
    def backward(ctx, grad_outputs):
        q, k, v = [t.detach().requires_grad_() for t in ctx.saved_tensors]
        with torch.enable_grad():
            s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            if ctx.causal:
                hidden = torch.ones(s.shape[-2:], dtype=torch.bool).triu(1)
                s = s.masked_fill(hidden, -math.inf)
            CALL
        return q.grad, k.grad, v.grad, None, None, None
"""


@pytest.mark.parametrize(
    "call",
    [
        "(torch.softmax(s, -1) @ v).backward(grad_outputs)",
        "torch.autograd.backward(torch.softmax(s, -1) @ v, grad_outputs)",
    ],
)
def test_backward_that_runs_autograd_is_named(call):
    ns = namespace("torch")
    exec(AUTOGRAD_BACKWARD.replace("CALL", call), ns)
    with pytest.raises(GradingError, match=r"\(autograd-in-backward\)"):
        judge("gradients", ns)


HONEST_EXTRAS = """
class FlashAttentionTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, keys, values, causal=False, block_q=64, block_k=64):
        outputs, logsumexp = flash_attention_torch(
            queries, keys, values, causal, block_q, block_k
        )
        # more than needed, never the weights: copies, D, the settings
        ctx.save_for_backward(queries, keys, values, outputs, logsumexp)
        ctx.copies = [t.clone() for t in (queries, keys, values, outputs)]
        ctx.extra = {"lse": logsumexp.clone(), "d": queries.shape[-1]}
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        LOG.append(tuple(queries.shape))
        return outputs

    backward = ORIGINAL.backward
"""


def test_honest_function_with_extra_state_is_not_accused():
    ns = namespace("torch")
    ns["ORIGINAL"], ns["LOG"] = ns["FlashAttentionTorch"], []
    exec(HONEST_EXTRAS, ns)
    judge("gradients", ns)
    assert ns["LOG"]  # the class under test was ours


def test_function_must_be_an_autograd_function():
    ns = namespace("torch")
    honest = ns["flash_attention_torch"]

    class FlashAttentionTorch:  # autograd through the forward, no backward
        @staticmethod
        def apply(q, k, v, causal, block_q, block_k):
            return honest(q, k, v, causal, block_q, block_k)[0]

    ns["FlashAttentionTorch"] = FlashAttentionTorch
    with pytest.raises(GradingError, match="subclass of torch.autograd.Function"):
        judge("gradients", ns)


def test_shapes_with_a_known_cause_are_named():
    ns = namespace("torch")
    honest = ns["flash_attention_torch"]

    def keepdims(*args):
        out, lse = honest(*args)
        return out, lse[..., None]

    def swapped(*args):
        out, lse = honest(*args)
        return lse, out

    for fn, tag in ((keepdims, "logsumexp-keepdims"), (swapped, "results-swapped")):
        with pytest.raises(GradingError, match=rf"\({tag}\)"):
            judge("forward", {"flash_attention_torch": fn})


# ------------------------------------------------------------ probe, seeds
def test_runs_leave_what_the_probe_watches_unchanged():
    from grader.kernel.probe import Probe

    probe = Probe()
    ns = namespace("tf", "torch")
    for framework in ("tf", "torch"):
        for check in ("forward", "causal", "gradients"):
            judge(check, ns, framework)
    with pytest.raises(GradingError):
        judge("memory", namespace(extra=NAIVE))
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
            "from attncourse.torch import flash_attention\n"
            "o = flash_attention(q, k, v)",
            "attncourse.torch.flash_attention",
        ),
        (
            "o = attncourse.tf.efficient.flash_attention(q, k, v)",
            "attncourse.tf.efficient",
        ),
        (
            "class F(attncourse.torch.FlashAttention):\n    pass",
            "attncourse.torch.FlashAttention",
        ),
        (
            "lse = attncourse.numpy.attention_logsumexp(q, k)",
            "attncourse.numpy.attention_logsumexp",
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
            "g = torch.autograd.grad(loss, [q])",
            "torch.autograd.grad",
        ),
        (
            "m = attncourse.torch.causal_mask(4, 4)",
            "attncourse.torch.causal_mask",
        ),
        (
            "torch.autograd.backward(out, grad_outputs)",
            "torch.autograd.backward",
        ),
        ("keys = torch.nan_to_num(keys)", "torch.nan_to_num"),
        ("keys = np.nan_to_num(keys)", "numpy.nan_to_num"),
        ("ok = tf.math.is_nan(keys)", "tensorflow.math.is_nan"),
        (
            "o = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)",
            "_scaled_dot_product_flash_attention_for_cpu",
        ),
    ],
)
def test_library_and_builtin_attention_are_flagged(code, name):
    found = provenance.scan([("torch-solution", code)], task.FORBIDDEN, SETUP)
    assert any(name in note for note in found.calls), found


def test_honest_solution_uses_none_of_it():
    cells = [(g, SOLUTIONS[g]) for g in ("tf-solution", "torch-solution")]
    found = provenance.scan(cells, task.FORBIDDEN, SETUP)
    assert not found.calls and not found.dynamic, found
