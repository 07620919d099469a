"""The Triton FlashAttention-2 kernels against three references.

Outputs, logsumexp and dQ, dK, dV of ``flash_attention_triton`` are checked
against the library's tiled PyTorch ``flash_attention`` (same dtype, autograd
through its FlashAttention backward), the NumPy ``flash_attention`` and
``flash_attention_backward`` in float64, and
``torch.nn.functional.scaled_dot_product_attention``, in float32 and
bfloat16; with lengths that are not multiples of the blocks, n_q != n_k
causal (bottom-right aligned), several heads. Without CUDA the kernels run
in Triton's interpreter (slow: the sizes are small); with CUDA the last test
runs them compiled. Skipped, naming the reason, where Triton is missing.
"""

import functools
import math

import pytest
from support.ci import on_ci

try:
    from attncourse import triton_flash as tf_
except ImportError as error:  # Triton is pinned for Linux x86_64 only
    if on_ci():  # CI installs it: a skip there would hide a broken install
        raise
    pytest.skip(
        f"triton is not installed ({error}); it is pinned for Linux x86_64",
        allow_module_level=True,
    )

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attncourse.numpy as anp  # noqa: E402
import attncourse.torch as atorch  # noqa: E402

# (batch, heads, n_q, n_k, d, d_v, causal, block_q, block_k): ragged lengths
# everywhere; n_q < n_k and n_q > n_k causal (the first 16 rows of the last
# see no key: output 0, logsumexp -inf); d_v != d; unequal blocks.
CASES = {
    "ragged": (2, 3, 37, 53, 32, 24, False, 16, 16),
    "causal-nq<nk": (1, 2, 37, 53, 32, 32, True, 16, 32),
    "causal-nq>nk": (1, 2, 53, 37, 16, 16, True, 32, 16),
    "causal-square": (2, 1, 40, 40, 64, 64, True, 16, 16),
}
# bfloat16 keeps 8 significant bits: a rounding errs by at most u = 2**-8 of
# the value. The kernel rounds where float32 would not -- the weights P
# before P @ V (and P, dS before the backward's products) and each result --
# while every sum accumulates in float32 (its error, ~1e-7, is negligible).
# An output therefore errs by at most u * (max|v| + |o|) <= 2u max|v|; a
# gradient by a few u of its products. We allow 4u times the largest entry
# of the float64 reference (measured on these cases: at most 2.4u); summing
# in bfloat16 instead (~u per addition, over tens of terms) lands outside.
BF16_U = 2.0**-8
BF16_TOL = 4 * BF16_U


def inputs(case, dtype=torch.float32, seed=0):
    b, h, nq, nk, d, d_v, *_ = CASES[case]
    gen = torch.Generator().manual_seed(seed)
    shapes = ((b, h, nq, d), (b, h, nk, d), (b, h, nk, d_v), (b, h, nq, d_v))
    q, k, v, grad = (torch.randn(s, generator=gen).to(dtype) for s in shapes)
    return q, k, v, grad


def grads_of(fn, q, k, v, grad):
    """fn's outputs (detached) and autograd's dQ, dK, dV for sum(out * grad)."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out, *rest = fn(q, k, v)
    (out * grad).sum().backward()
    return (out.detach(), *rest), (q.grad, k.grad, v.grad)


@functools.cache
def triton_run(case, dtype=torch.float32, align="bottom_right"):
    """The kernels on one case, run once per session (the interpreter is slow)."""
    *_, causal, block_q, block_k = CASES[case]
    q, k, v, grad = inputs(case, dtype)
    (out, lse), grads = grads_of(
        lambda q, k, v: tf_.flash_attention_triton(
            q, k, v, causal=causal, block_q=block_q, block_k=block_k, align=align
        ),
        q, k, v, grad,
    )  # fmt: skip
    return out, lse, grads


def numpy_reference(case, dtype=torch.float32, align="bottom_right"):
    """The NumPy tiled attention and its backward in float64, heads folded."""
    *_, causal, block_q, block_k = CASES[case]
    q, k, v, grad = (x.double().flatten(0, 1).numpy() for x in inputs(case, dtype))
    opts = {"causal": causal, "block_q": 8, "block_k": 8, "align": align}
    out, lse = anp.flash_attention(q, k, v, **opts)
    grads = anp.flash_attention_backward(q, k, v, out, lse, grad, **opts)
    shape = CASES[case][:2]
    return tuple(
        torch.from_numpy(x).reshape(*shape, *x.shape[1:]) for x in (out, lse, *grads)
    )


def assert_close(actual, expected, atol, what):
    actual, expected = actual.double(), expected.double()
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(actual), finite), f"{what}: -inf/NaN differ"
    err = (actual[finite] - expected[finite]).abs().max().item()
    assert err <= atol, f"{what}: max error {err:.3g} > {atol:.3g}"


@pytest.mark.parametrize("case", CASES)
def test_float32_matches_numpy_float64(case):
    out, lse, grads = triton_run(case)
    ref = numpy_reference(case)
    assert_close(out, ref[0], 2e-5, "outputs")
    assert_close(lse, ref[1], 2e-5, "logsumexp")
    for name, g, r in zip(("dQ", "dK", "dV"), grads, ref[2:], strict=True):
        assert_close(g, r, 5e-5, name)


@pytest.mark.parametrize("case", CASES)
def test_float32_matches_library_flash_attention(case):
    """The library's tiled PyTorch version (heads folded into the batch)."""
    b, h, nq, nk, d, d_v, causal, block_q, block_k = CASES[case]
    out, lse, grads = triton_run(case)
    q, k, v, grad = inputs(case)

    def library(q, k, v):
        fold = [x.flatten(0, 1) for x in (q, k, v)]
        o, l = atorch.flash_attention(
            *fold, causal=causal, block_q=block_q, block_k=block_k,
            align="bottom_right",
        )  # fmt: skip
        return o.reshape(b, h, nq, d_v), l.reshape(b, h, nq)

    (ref_out, ref_lse), ref_grads = grads_of(library, q, k, v, grad)
    assert_close(out, ref_out, 2e-5, "outputs")
    assert_close(lse, ref_lse, 2e-5, "logsumexp")
    for name, g, r in zip(("dQ", "dK", "dV"), grads, ref_grads, strict=True):
        assert_close(g, r, 5e-5, name)


@pytest.mark.parametrize("case", ["ragged", "causal-nq<nk", "causal-square"])
def test_float32_matches_sdpa(case):
    """SDPA with an explicit bottom-right mask (its is_causal is top-left);
    cases without fully masked rows (SDPA gives NaN there)."""
    *_, nq, nk, _, _, causal, _, _ = CASES[case]
    out, _, grads = triton_run(case)
    mask = torch.from_numpy(anp.causal_mask(nq, nk, align="bottom_right"))
    mask = mask if causal else None
    (ref,), ref_grads = grads_of(
        lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),),
        *inputs(case),
    )
    assert_close(out, ref, 2e-5, "outputs")
    for name, g, r in zip(("dQ", "dK", "dV"), grads, ref_grads, strict=True):
        assert_close(g, r, 5e-5, name)


@pytest.mark.parametrize("case", ["causal-nq<nk", "causal-nq>nk"])
def test_bfloat16_within_its_rounding(case):
    """bf16 inputs, float32 accumulation: within 4u of the float64 reference
    on the same (bf16-rounded) inputs; logsumexp stays float32."""
    out, lse, grads = triton_run(case, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert all(g.dtype == torch.bfloat16 for g in grads)
    ref = numpy_reference(case, torch.bfloat16)
    for name, x, r in zip(
        ("outputs", "dQ", "dK", "dV"), (out, *grads), (ref[0], *ref[2:]), strict=True
    ):
        assert_close(x, r, BF16_TOL * r.abs().max().item(), name)
    # the scores are float32 products of bf16 numbers: logsumexp is float32-exact
    assert_close(lse, ref[1], 2e-5, "logsumexp")


def test_top_left_alignment_is_the_pitfall():
    """With n_q != n_k, top-left causal is a different function: it equals
    the top-left reference and is far from the bottom-right one."""
    case = "causal-nq<nk"
    out_tl, _, _ = triton_run(case, align="top_left")
    out_br, _, _ = triton_run(case)
    assert_close(out_tl, numpy_reference(case, align="top_left")[0], 2e-5, "top-left")
    assert (out_tl - out_br).abs().max().item() > 0.5


def test_fully_masked_rows_are_zero_with_zero_gradients():
    out, lse, (dq, _, _) = triton_run("causal-nq>nk")
    hidden = 53 - 37  # bottom-right: query i sees keys j <= i - 16
    assert torch.all(lse[..., :hidden] == -math.inf)
    assert torch.all(out[..., :hidden, :] == 0) and torch.all(dq[..., :hidden, :] == 0)
    assert torch.isfinite(lse[..., hidden:]).all()


def test_causal_tiles_above_the_diagonal_are_never_loaded():
    """NaN values in the last key block: a query block that loaded that tile
    would get NaN (0 * NaN) even with every weight masked to 0."""
    q, k, v, _ = inputs("causal-square")
    v[..., 32:, :] = math.nan  # key block 2 (32..47) and the ragged block 3
    out, _ = tf_.flash_attention_triton(q, k, v, causal=True, block_q=16, block_k=16)
    assert torch.isfinite(out[..., :32, :]).all()  # query blocks 0, 1: skipped
    assert torch.isnan(out[..., 32:, :]).all(dim=-1).all()  # they see a NaN


def test_bad_inputs_are_named():
    q = torch.zeros(1, 20, 16)
    with pytest.raises(ValueError, match="block_q must be a power of 2"):
        tf_.flash_attention_triton(q, q, q, block_q=24)
    with pytest.raises(ValueError, match="shapes do not fit"):
        tf_.flash_attention_triton(q, q[..., :8], q)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        tf_.flash_attention_triton(q.double(), q.double(), q.double())


def test_interpreter_without_cuda():
    assert tf_.interpreted() or torch.cuda.is_available()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_on_cuda_matches_sdpa(dtype):
    """Compiled kernels (not the interpreter) against SDPA on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, grad = (
        torch.randn(2, 4, n, 64, device="cuda", generator=gen, dtype=dtype)
        for n in (300, 300, 300, 300)
    )
    (out, _), grads = grads_of(
        lambda q, k, v: tf_.flash_attention_triton(q, k, v, causal=True), q, k, v, grad
    )
    (ref,), ref_grads = grads_of(
        lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True),),
        q, k, v, grad,
    )  # fmt: skip
    tol = 2e-4 if dtype == torch.float32 else BF16_TOL
    for x, r in zip((out, *grads), (ref, *ref_grads), strict=True):
        assert_close(x.cpu(), r.cpu(), tol * max(1.0, r.abs().max().item()), "cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_triton_imported_first_still_runs_in_the_interpreter():
    """`import torch` (or a site hook) may import Triton before the module sets
    TRITON_INTERPRET: its jit helpers (tl.zeros, tl.sum) are then rebuilt."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import triton, torch\n"
        "from attncourse import triton_flash as t\n"
        "q = torch.randn(1, 20, 16)\n"
        "out, _ = t.flash_attention_triton(q, q, q, block_q=16, block_k=16)\n"
        "ref = torch.nn.functional.scaled_dot_product_attention(q, q, q)\n"
        "print(t.interpreted(), float((out - ref).abs().max()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    interpreted, err = done.stdout.split()
    assert interpreted == "True" and float(err) < 1e-5


def test_without_triton_the_import_error_says_why():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "for name in [m for m in sys.modules if m.split('.')[0] == 'triton']:\n"
        "    del sys.modules[name]\n"
        "sys.modules['triton'] = None  # as if it were not installed\n"
        "import attncourse.triton_flash\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        cwd=root, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert "Linux x86_64 only" in done.stderr and "macOS or Windows" in done.stderr
