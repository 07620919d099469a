"""FlashAttention-2 as Triton kernels: forward, backward, autograd.Function.

The tiled algorithm of ``attncourse.torch.flash_attention`` written as GPU
kernels. One *program* owns one block of queries of one (batch, head) row:
the grid is (query blocks, batch * heads). The loop over key blocks, a
Python loop launching many small kernels in the PyTorch version, runs
inside that program, so the scores of a tile live only in on-chip memory.

* ``forward_kernel``: online softmax over key blocks; writes outputs and
  logsumexp (float32). Inputs may be float32, float16 or bfloat16: both
  ``tl.dot`` products accumulate in float32, and so do the running max,
  running sum and output accumulator.
* Backward (FlashAttention-2): ``delta_kernel`` computes D = rowsum(dO * O);
  ``dkdv_kernel`` runs one program per *key* block and sums dK, dV over the
  query blocks; ``dq_kernel`` runs one program per *query* block and sums dQ
  over the key blocks. Each gradient row is written by exactly one program,
  so there are no atomic adds: the result is deterministic (the summation
  order is fixed) and needs no float32 scratch buffer or extra pass. The
  price is that the scores of each tile are recomputed twice.

``causal=True`` is **bottom-right aligned** by default (query i sees key j iff
j <= i + num_keys - num_queries), as in FlashAttention >= 2.1 and the
kv-cache chapter: the queries are the last positions of the keys' sequence.
``align="top_left"`` (j <= i, the convention of ``causal_mask`` and of
``scaled_dot_product_attention(is_causal=True)``) is available; with
num_queries == num_keys both agree. Key blocks entirely above the diagonal
are never loaded; a query row that sees no key gets output 0 and logsumexp
-inf (as in the library's ``flash_attention``).

Without a CUDA device, importing this module sets ``TRITON_INTERPRET=1``
(unless the variable is set already): Triton's interpreter then runs the
kernels on CPU tensors with NumPy, slowly but with the same arithmetic. With
a device the same kernels are compiled. The variable must be set before
Triton is first imported (its own helpers, ``tl.zeros``, ``tl.sum``, are
defined then) and ``import torch`` imports Triton, so the device is found
through the CUDA driver (``libcuda``), not torch; if Triton came first
anyway, its helpers are rebuilt for the interpreter
(``_interpret_triton_helpers``).
Import it before TensorFlow too: both bundle LLVM, and Triton imported after
TensorFlow aborts the process. Triton is pinned for Linux x86_64 only.
"""

import ctypes
import math
import os


def _cuda_device() -> bool:
    """Whether the CUDA driver sees a device (without importing torch)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


if not _cuda_device():  # before torch, which imports triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

try:
    import triton
except ImportError as error:  # not Linux x86_64, or not installed
    raise ImportError(
        "attncourse.triton_flash needs Triton, which the course pins for Linux "
        "x86_64 only (PyPI has no Triton for macOS or Windows; README, "
        "'Triton'). Read the attention-kernel chapter on the course's site, or "
        "run it on Linux or on a machine with an NVIDIA GPU."
    ) from error
import triton.language as tl  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from attncourse import checks  # noqa: E402


def interpreted() -> bool:
    """True when the kernels run in Triton's CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _interpret_triton_helpers() -> int:
    """Rebuild Triton's own @jit helpers (tl.zeros, tl.sum, tl.max, ...) for
    the interpreter; returns how many were rebuilt.

    They are built when Triton is first imported. If that happened before
    TRITON_INTERPRET=1 was set (``import torch`` imports Triton; so can a
    site hook), they are compiler functions that refuse to run on the CPU.
    Each is replaced, in every module of triton.language that names it, by
    an interpreted function over the same Python source.
    """
    from triton.runtime.interpreter import InterpretedFunction

    modules = [tl, tl.core, tl.standard, tl.math, tl.random]
    new = {}  # id(compiler function) -> interpreted function
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, JITFunction) and id(value) not in new:
                new[id(value)] = InterpretedFunction(value.fn)
    for module in modules:
        for name, value in list(vars(module).items()):
            if id(value) in new:
                setattr(module, name, new[id(value)])
    return len(new)


if interpreted() and isinstance(tl.zeros, JITFunction):
    _interpret_triton_helpers()
if not interpreted() and not torch.cuda.is_available():
    raise ImportError(
        "a CUDA driver is present but this torch cannot use it: set "
        "TRITON_INTERPRET=1 to run the kernels on the CPU"
    )

__all__ = [
    "FlashAttentionTriton",
    "delta_kernel",
    "dkdv_kernel",
    "dq_kernel",
    "flash_attention_triton",
    "flash_attention_triton_backward",
    "forward_kernel",
    "interpreted",
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """a @ b accumulated in float32. UPCAST (interpreter only): its tl.dot
    mishandles 16-bit floats, so they go in as float32 -- the same products,
    since a product of two bf16 (or fp16) numbers is exact in float32.
    PRECISION "ieee" keeps float32 inputs float32 on a GPU (not TF32)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def forward_kernel(
    Q, K, V, O, L,  # (bh, n, d) inputs and outputs; L: (bh, n_q) float32
    n_q, n_k, d, d_v, scale, diagonal,  # diagonal: query i sees key j <= i + it
    s_qb, s_qn, s_kb, s_kn, s_vb, s_vn, s_ob, s_on,  # strides (batch*head, row)
    D_QK: tl.constexpr, D_V: tl.constexpr,  # head sizes padded to powers of 2
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: BLOCK_Q queries of one (batch, head) row against every
    key block it can see; writes their outputs O and logsumexp L."""
    start_q = tl.program_id(0) * BLOCK_Q  # this program's block of queries
    bh = tl.program_id(1)  # ... of this (batch, head) row
    rows = start_q + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,) query indices
    dk, dv = tl.arange(0, D_QK), tl.arange(0, D_V)
    q = tl.load(  # (BLOCK_Q, D_QK); rows past n_q and padded features read 0
        Q + bh * s_qb + rows[:, None] * s_qn + dk[None, :],
        mask=(rows[:, None] < n_q) & (dk[None, :] < d),
        other=0.0,
    )
    m = tl.full((BLOCK_Q,), float("-inf"), tl.float32)  # running max
    l = tl.zeros((BLOCK_Q,), tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros((BLOCK_Q, D_V), tl.float32)  # unnormalised outputs
    stop = n_k  # causal: key blocks after the last row's diagonal are skipped
    if CAUSAL:
        stop = tl.maximum(0, tl.minimum(n_k, start_q + BLOCK_Q + diagonal))
    for start_k in range(0, stop, BLOCK_K):
        cols = start_k + tl.arange(0, BLOCK_K)  # (BLOCK_K,) key indices
        k = tl.load(  # (BLOCK_K, D_QK)
            K + bh * s_kb + cols[:, None] * s_kn + dk[None, :],
            mask=(cols[:, None] < n_k) & (dk[None, :] < d),
            other=0.0,
        )
        v = tl.load(  # (BLOCK_K, D_V)
            V + bh * s_vb + cols[:, None] * s_vn + dv[None, :],
            mask=(cols[:, None] < n_k) & (dv[None, :] < d_v),
            other=0.0,
        )
        s = _dot(q, tl.trans(k), UPCAST, PRECISION) * scale  # (BLOCK_Q, BLOCK_K)
        keep = cols[None, :] < n_k  # ragged last block: keys past n_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + diagonal)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # (BLOCK_Q,)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
        p = tl.exp(s - shift[:, None])  # (BLOCK_Q, BLOCK_K) unnormalised
        rescale = tl.exp(m - shift)  # exp(m_old - m_new)
        l = rescale * l + tl.sum(p, axis=1)
        pv = _dot(p.to(v.dtype), v, UPCAST, PRECISION)  # (BLOCK_Q, D_V)
        acc = rescale[:, None] * acc + pv
        m = m_new
    seen = l > 0  # rows with at least one visible key
    l_safe = tl.where(seen, l, 1.0)
    out = acc / l_safe[:, None]  # (BLOCK_Q, D_V)
    lse = tl.where(seen, m + tl.log(l_safe), float("-inf"))  # (BLOCK_Q,)
    tl.store(
        O + bh * s_ob + rows[:, None] * s_on + dv[None, :],
        out.to(O.dtype.element_ty),
        mask=(rows[:, None] < n_q) & (dv[None, :] < d_v),
    )
    tl.store(L + bh * n_q + rows, lse, mask=rows < n_q)


@triton.jit
def delta_kernel(
    O, DO, Delta, n_q, d_v, s_b, s_n,
    D_V: tl.constexpr, BLOCK_Q: tl.constexpr,
):  # fmt: skip
    """Delta[i] = sum_c dO[i, c] * O[i, c] in float32 (FlashAttention-2's D)."""
    rows = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    bh = tl.program_id(1)
    dv = tl.arange(0, D_V)
    where = bh * s_b + rows[:, None] * s_n + dv[None, :]
    inside = (rows[:, None] < n_q) & (dv[None, :] < d_v)
    o = tl.load(O + where, mask=inside, other=0.0).to(tl.float32)
    do = tl.load(DO + where, mask=inside, other=0.0).to(tl.float32)
    tl.store(Delta + bh * n_q + rows, tl.sum(o * do, axis=1), mask=rows < n_q)


@triton.jit
def dkdv_kernel(
    Q, K, V, DO, L, Delta, DK, DV,
    n_q, n_k, d, d_v, scale, diagonal,
    s_qb, s_qn, s_kb, s_kn, s_vb, s_vn, s_ob, s_on,
    D_QK: tl.constexpr, D_V: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One program per key block: dV = sum P^T dO, dK = sum dS^T Q * scale."""
    start_k = tl.program_id(0) * BLOCK_K
    bh = tl.program_id(1)
    cols = start_k + tl.arange(0, BLOCK_K)
    dk, dv = tl.arange(0, D_QK), tl.arange(0, D_V)
    k = tl.load(
        K + bh * s_kb + cols[:, None] * s_kn + dk[None, :],
        mask=(cols[:, None] < n_k) & (dk[None, :] < d),
        other=0.0,
    )  # (BLOCK_K, D_QK)
    v = tl.load(
        V + bh * s_vb + cols[:, None] * s_vn + dv[None, :],
        mask=(cols[:, None] < n_k) & (dv[None, :] < d_v),
        other=0.0,
    )  # (BLOCK_K, D_V)
    grad_k = tl.zeros((BLOCK_K, D_QK), tl.float32)
    grad_v = tl.zeros((BLOCK_K, D_V), tl.float32)
    first = 0  # causal: query rows before start_k - diagonal see none of these keys
    if CAUSAL:
        first = tl.maximum(0, start_k - diagonal) // BLOCK_Q * BLOCK_Q
    for start_q in range(first, n_q, BLOCK_Q):
        rows = start_q + tl.arange(0, BLOCK_Q)
        q = tl.load(
            Q + bh * s_qb + rows[:, None] * s_qn + dk[None, :],
            mask=(rows[:, None] < n_q) & (dk[None, :] < d),
            other=0.0,
        )  # (BLOCK_Q, D_QK)
        do = tl.load(
            DO + bh * s_ob + rows[:, None] * s_on + dv[None, :],
            mask=(rows[:, None] < n_q) & (dv[None, :] < d_v),
            other=0.0,
        )  # (BLOCK_Q, D_V)
        lse = tl.load(L + bh * n_q + rows, mask=rows < n_q, other=0.0)
        lse = tl.where(lse == float("-inf"), 0.0, lse)  # fully masked rows
        delta = tl.load(Delta + bh * n_q + rows, mask=rows < n_q, other=0.0)
        s = _dot(q, tl.trans(k), UPCAST, PRECISION) * scale  # recomputed scores
        keep = (rows[:, None] < n_q) & (cols[None, :] < n_k)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + diagonal)
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)  # the weights
        p_t = tl.trans(p.to(do.dtype))  # (BLOCK_K, BLOCK_Q)
        grad_v += _dot(p_t, do, UPCAST, PRECISION)  # (BLOCK_K, D_V)
        dp = _dot(do, tl.trans(v), UPCAST, PRECISION)  # (BLOCK_Q, BLOCK_K)
        ds = p * (dp - delta[:, None])  # (BLOCK_Q, BLOCK_K)
        ds_t = tl.trans(ds.to(q.dtype))  # (BLOCK_K, BLOCK_Q)
        grad_k += _dot(ds_t, q, UPCAST, PRECISION)  # (BLOCK_K, D_QK)
    tl.store(
        DK + bh * s_kb + cols[:, None] * s_kn + dk[None, :],
        (grad_k * scale).to(DK.dtype.element_ty),
        mask=(cols[:, None] < n_k) & (dk[None, :] < d),
    )
    tl.store(
        DV + bh * s_vb + cols[:, None] * s_vn + dv[None, :],
        grad_v.to(DV.dtype.element_ty),
        mask=(cols[:, None] < n_k) & (dv[None, :] < d_v),
    )


@triton.jit
def dq_kernel(
    Q, K, V, DO, L, Delta, DQ,
    n_q, n_k, d, d_v, scale, diagonal,
    s_qb, s_qn, s_kb, s_kn, s_vb, s_vn, s_ob, s_on,
    D_QK: tl.constexpr, D_V: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One program per query block: dQ = sum dS K * scale over key blocks."""
    start_q = tl.program_id(0) * BLOCK_Q
    bh = tl.program_id(1)
    rows = start_q + tl.arange(0, BLOCK_Q)
    dk, dv = tl.arange(0, D_QK), tl.arange(0, D_V)
    q = tl.load(
        Q + bh * s_qb + rows[:, None] * s_qn + dk[None, :],
        mask=(rows[:, None] < n_q) & (dk[None, :] < d),
        other=0.0,
    )
    do = tl.load(
        DO + bh * s_ob + rows[:, None] * s_on + dv[None, :],
        mask=(rows[:, None] < n_q) & (dv[None, :] < d_v),
        other=0.0,
    )
    lse = tl.load(L + bh * n_q + rows, mask=rows < n_q, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)
    delta = tl.load(Delta + bh * n_q + rows, mask=rows < n_q, other=0.0)
    grad_q = tl.zeros((BLOCK_Q, D_QK), tl.float32)
    stop = n_k
    if CAUSAL:
        stop = tl.maximum(0, tl.minimum(n_k, start_q + BLOCK_Q + diagonal))
    for start_k in range(0, stop, BLOCK_K):
        cols = start_k + tl.arange(0, BLOCK_K)
        k = tl.load(
            K + bh * s_kb + cols[:, None] * s_kn + dk[None, :],
            mask=(cols[:, None] < n_k) & (dk[None, :] < d),
            other=0.0,
        )
        v = tl.load(
            V + bh * s_vb + cols[:, None] * s_vn + dv[None, :],
            mask=(cols[:, None] < n_k) & (dv[None, :] < d_v),
            other=0.0,
        )
        s = _dot(q, tl.trans(k), UPCAST, PRECISION) * scale
        keep = (rows[:, None] < n_q) & (cols[None, :] < n_k)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + diagonal)
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dp = _dot(do, tl.trans(v), UPCAST, PRECISION)
        ds = p * (dp - delta[:, None])
        grad_q += _dot(ds.to(k.dtype), k, UPCAST, PRECISION)  # (BLOCK_Q, D_QK)
    tl.store(
        DQ + bh * s_qb + rows[:, None] * s_qn + dk[None, :],
        (grad_q * scale).to(DQ.dtype.element_ty),
        mask=(rows[:, None] < n_q) & (dk[None, :] < d),
    )


def _fold(x):
    """(..., n, d) -> a contiguous (batch * heads, n, d) view or copy."""
    return x.reshape(-1, *x.shape[-2:]).contiguous()


def _pad(size: int) -> int:
    """A feature size rounded up to a power of 2 (>= 16, tl.dot's minimum)."""
    return max(16, triton.next_power_of_2(size))


def _check(queries, keys, values, causal, block_q, block_k, scale, align):
    """One named call for every input check (shapes, dtypes, block sizes)."""
    tensors = {"queries": queries, "keys": keys, "values": values}
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in DTYPES or x.ndim < 3:
            raise ValueError(
                f"{name} must be float32, float16 or bfloat16 with shape "
                f"(batch, [heads,] n, d), got {x.dtype} {tuple(x.shape)}"
            )
    q, k, v = queries.shape, keys.shape, values.shape
    if not (q[:-2] == k[:-2] == v[:-2]) or q[-1] != k[-1] or k[-2] != v[-2]:
        raise ValueError(
            f"shapes do not fit: queries {tuple(q)} (..., nq, d), keys {tuple(k)} "
            f"(..., nk, d), values {tuple(v)} (..., nk, d_v)"
        )
    if not (queries.dtype == keys.dtype == values.dtype):
        raise ValueError("queries, keys and values must share one dtype")
    if not (queries.device == keys.device == values.device):
        raise ValueError("queries, keys and values must be on one device")
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        checks.check_block_size(name, size)
        if size < 16 or size & (size - 1):
            raise ValueError(
                f"{name} must be a power of 2 >= 16 (tl.arange and tl.dot), got {size}"
            )
    checks.check_causal_flag(causal)
    checks.check_causal_align(align)
    checks.check_scale(scale)


def _launch_args(queries, keys, values, outputs, causal, scale, align):
    """Sizes, scale, causal diagonal and strides shared by every kernel."""
    (n_q, d), (n_k, d_v) = queries.shape[1:], values.shape[1:]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    diagonal = n_k - n_q if align == "bottom_right" else 0
    strides = (
        *queries.stride()[:2], *keys.stride()[:2],
        *values.stride()[:2], *outputs.stride()[:2],
    )  # fmt: skip
    return (n_q, n_k, d, d_v, scale, diagonal, *strides), (d, d_v)


def _dot_options(dtype):
    """The constexprs of _dot for inputs of this dtype."""
    return {
        "UPCAST": interpreted() and dtype != torch.float32,
        "PRECISION": "ieee" if dtype == torch.float32 else "tf32",
    }


def _forward(queries, keys, values, causal, block_q, block_k, scale, align):
    """Folded (bh, n, d) tensors -> (outputs (bh, nq, d_v), logsumexp float32)."""
    bh, n_q = queries.shape[:2]
    outputs = torch.empty(
        bh, n_q, values.shape[2], dtype=queries.dtype, device=queries.device
    )
    logsumexp = torch.empty(bh, n_q, dtype=torch.float32, device=queries.device)
    args, (d, d_v) = _launch_args(queries, keys, values, outputs, causal, scale, align)
    grid = (triton.cdiv(n_q, block_q), bh)
    forward_kernel[grid](
        queries, keys, values, outputs, logsumexp, *args,
        D_QK=_pad(d), D_V=_pad(d_v), BLOCK_Q=block_q, BLOCK_K=block_k,
        CAUSAL=causal, **_dot_options(queries.dtype), num_warps=4, num_stages=2,
    )  # fmt: skip
    return outputs, logsumexp


def _backward(queries, keys, values, outputs, logsumexp, grad_outputs, options):
    """Folded tensors -> (dQ, dK, dV): the delta pre-pass and two kernels."""
    causal, block_q, block_k, scale, align = options
    bh, n_q = queries.shape[:2]
    n_k = keys.shape[1]
    grad_outputs = grad_outputs.contiguous()
    delta = torch.empty(bh, n_q, dtype=torch.float32, device=queries.device)
    args, (d, d_v) = _launch_args(queries, keys, values, outputs, causal, scale, align)
    sizes = {"D_QK": _pad(d), "D_V": _pad(d_v)}
    delta_kernel[(triton.cdiv(n_q, block_q), bh)](
        outputs, grad_outputs, delta, n_q, d_v, *outputs.stride()[:2],
        D_V=sizes["D_V"], BLOCK_Q=block_q,
    )  # fmt: skip
    grad_q, grad_k, grad_v = (torch.empty_like(x) for x in (queries, keys, values))
    blocks = {"BLOCK_Q": block_q, "BLOCK_K": block_k, "CAUSAL": causal}
    blocks |= _dot_options(queries.dtype)
    tensors = (queries, keys, values, grad_outputs, logsumexp, delta)
    dkdv_kernel[(triton.cdiv(n_k, block_k), bh)](
        *tensors, grad_k, grad_v, *args, **sizes, **blocks
    )
    dq_kernel[(triton.cdiv(n_q, block_q), bh)](
        *tensors, grad_q, *args, **sizes, **blocks
    )
    return grad_q, grad_k, grad_v


class FlashAttentionTriton(torch.autograd.Function):
    """The Triton kernels as an autograd function.

    FlashAttentionTriton.apply(queries, keys, values, causal, block_q,
    block_k, scale, align) -> (outputs, logsumexp) on folded (batch * heads,
    n, d) contiguous tensors; flash_attention_triton validates and folds.
    logsumexp (float32) carries no gradient.
    """

    @staticmethod
    def forward(ctx, queries, keys, values, causal, block_q, block_k, scale, align):
        options = (causal, block_q, block_k, scale, align)
        outputs, logsumexp = _forward(queries, keys, values, *options)
        ctx.save_for_backward(queries, keys, values, outputs, logsumexp)
        ctx.options = options
        ctx.mark_non_differentiable(logsumexp)
        return outputs, logsumexp

    @staticmethod
    def backward(ctx, grad_outputs, grad_logsumexp):
        grads = _backward(*ctx.saved_tensors, grad_outputs, ctx.options)
        return (*grads, None, None, None, None, None)


def flash_attention_triton(
    queries,
    keys,
    values,
    causal=False,
    block_q=64,
    block_k=64,
    scale=None,
    align="bottom_right",
):
    """softmax(q k^T * scale) v by the Triton kernels: (outputs, logsumexp).

    queries (..., nq, d), keys (..., nk, d), values (..., nk, d_v) with the
    same leading axes, e.g. (batch, nq, d) as in attncourse.torch or
    (batch, heads, nq, d) as in scaled_dot_product_attention; float32,
    float16 or bfloat16. block_q, block_k: powers of 2 >= 16 (they need not
    divide nq, nk). align as in flash_attention, but bottom_right by default.
    Returns outputs (..., nq, d_v) in the inputs' dtype and logsumexp (...,
    nq) in float32. Differentiable in the outputs.
    """
    _check(queries, keys, values, causal, block_q, block_k, scale, align)
    lead, n_q = queries.shape[:-2], queries.shape[-2]
    folded = (_fold(queries), _fold(keys), _fold(values))
    outputs, logsumexp = FlashAttentionTriton.apply(
        *folded, bool(causal), block_q, block_k, scale, align
    )
    return outputs.reshape(*lead, n_q, -1), logsumexp.reshape(*lead, n_q)


def flash_attention_triton_backward(
    queries,
    keys,
    values,
    outputs,
    logsumexp,
    grad_outputs,
    causal=False,
    block_q=64,
    block_k=64,
    scale=None,
    align="bottom_right",
):
    """(dQ, dK, dV) from the forward's outputs and logsumexp, by the kernels.

    Arguments as in flash_attention_triton plus what it returned and
    grad_outputs = dLoss/dOutputs (shaped like outputs). For callers outside
    torch.autograd, e.g. the TensorFlow tab's tf.custom_gradient.
    """
    _check(queries, keys, values, causal, block_q, block_k, scale, align)
    lead = queries.shape[:-2]
    folded = [_fold(x) for x in (queries, keys, values, outputs, grad_outputs)]
    lse = logsumexp.reshape(-1, logsumexp.shape[-1]).float().contiguous()
    options = (bool(causal), block_q, block_k, scale, align)
    grads = _backward(*folded[:3], folded[3], lse, folded[4], options)
    shapes = (queries.shape, keys.shape, values.shape)
    return tuple(g.reshape(*lead, *s[-2:]) for g, s in zip(grads, shapes, strict=True))
