"""Time and peak memory of from-scratch attention vs the fused built-ins, on CPU.

The measuring core of ``bench/attention_speed.py`` (``make bench-attention``)
and of the chapters "What attention costs" and "Tiled attention". Use it
in-process::

    from attncourse import benchmark
    benchmark.set_threads(1)
    rows = benchmark.measure(time_lengths=(128, 256), repeats=7,
                             impls=["torch ours", "torch SDPA"],
                             passes=("forward", "backward"))

or in a fresh process, which leaves the caller's allocator, thread pools and
memory high-water mark untouched (``python -m attncourse.benchmark`` is that
child and prints its report as JSON)::

    report = benchmark.run_subprocess(memory_lengths=(512, 1024), threads=1,
                                      passes=("forward", "backward"),
                                      budget_mib=256)

What runs: softmax(q k^T / sqrt(d)) v without a mask, batch 1, 8 heads of
d_head 64 (d_model 512, the Transformer-base size), float32, q, k, v three
tensors holding the same numbers.

* ``numpy ours``, ``tf ours``, ``torch ours`` -- the course's
  ``scaled_dot_product_attention``; it materialises the (heads, n, n) weights,
  as the chapters' code does. ``tf ours XLA`` is the same function under
  ``tf.function(jit_compile=True)``.
* ``tf tiled``, ``torch tiled`` -- the library's ``flash_attention`` with
  query and key blocks of ``BLOCK``: an online softmax over (BLOCK, BLOCK)
  tiles in framework ops, a Python loop over the tiles; its backward pass
  recomputes the weights tile by tile.
* ``keras.ops.dpa`` -- ``keras.ops.dot_product_attention``. TensorFlow has no
  fused attention op, so on the TF backend it is einsum -> softmax -> einsum
  (its ``flash_attention=True`` raises on this backend). ``keras.ops.dpa XLA``
  compiles it with XLA; on CPU its peak memory still grows like
  (heads, n, n) arrays, so it is "compiled", not "fused" in the
  flash-attention sense (the memory columns show it).
* ``torch SDPA`` -- ``torch.nn.functional.scaled_dot_product_attention``; on
  CPU it dispatches to a flash-attention kernel that streams over blocks of
  keys and never holds the n x n matrix. ``torch SDPA math`` forces the same
  function onto its reference "math" backend (``sdpa_kernel(SDPBackend.MATH)``),
  which does materialise the weights: same API, different kernel.

Every TF case runs under ``tf.device("/CPU:0")``: on a machine with a GPU,
TensorFlow would otherwise place its ops there while torch stays on the CPU.

Passes: ``"forward"`` is one call; ``"backward"`` is the forward call and the
gradients of sum(outputs * g) with respect to q, k and v for a fixed seeded
upstream gradient g (``torch.autograd.grad``; in TF a ``GradientTape`` with
``output_gradients``; under XLA the tape inside the compiled function). NumPy
has no autograd: ``numpy ours`` has no backward pass, and its backward rows
are left out (``report()["skipped"]`` says so). Before timing, every method
and pass is checked against float64 NumPy at the smallest length (outputs;
for the backward pass the three gradients, from the analytic backward).

Memory budget: ``budget_mib`` skips the cases of the materialising methods
(kinds naive, built-in, compiled) whose predicted table memory,
``predicted_mib(n, pass)`` = ``TABLES[pass]`` (heads, n, n) float32 tables,
exceeds the budget; their rows have status "over budget" and no numbers, and
the tables say "over budget". Fused and tiled methods have no n x n table
and always run, so a sweep can go on past where the naive methods stop.

Threads: every framework gets the same number of CPU threads (``set_threads``;
1 in the CLI and the chapter). On a small shared machine several
multi-threaded runtimes in one process (OpenBLAS, Eigen, OpenMP) fight over the
cores and spin-wait on each other; one thread each gives stable, comparable
numbers. Environment variables only act if set before a library is loaded, and
``import attncourse`` already loads NumPy, so ``set_threads`` also sets the
limits at run time: OpenBLAS (NumPy's) through its C API, torch through
``torch.set_num_threads``, TensorFlow through ``tf.config.threading`` (which only
works before TF runs its first op; ``thread_settings()`` reports what is in
force either way).

Time: one warm-up call per case (first-call set-up; it also compiles XLA),
then ``repeats`` (default 7) interleaved rounds, each calling every
implementation and pass at that length once (so load from other processes hits
them alike), all in one process. Each round more than ``OUTLIER_FACTOR`` (2)
times its case's median is re-timed once, right after the rounds, and the new
time replaces it (rows record ``retimed`` and the replaced ``outliers_ms``).
Rows give the median, the quartiles ``q1_ms`` / ``q3_ms`` (spread = the
interquartile range, ``iqr_ms``) and the min and max. TF and torch run eagerly
on CPU, where their ops finish before returning, so wall time is compute time.
Reports record the machine's load average: on a shared machine, compare ratios
from one run rather than times across runs.

Peak memory: tracemalloc cannot see TF's or torch's C++ allocations, so the
resident set size is measured instead. Before each case the process's RSS
high-water mark is reset (writing 5 to /proc/self/clear_refs, Linux >= 4.0),
then one (warm) call runs; "peak MiB" = VmHWM after the call - VmRSS before
it: the extra memory the call touched at its peak, outputs (or gradients)
included, inputs not. For the backward pass that peak includes what the
forward pass kept for the backward. For that pass glibc is told to serve every
allocation >= 64 KiB with its own mmap (mallopt M_MMAP_THRESHOLD) and
``malloc_trim`` runs between cases, so freed buffers go back to the OS and are
not silently reused by the next case. Both settings stay in force in the
measuring process afterwards (and the reset high-water mark hides earlier peaks
from tools such as ``time -v``), which is why ``run_subprocess`` exists. Where
clear_refs is not writable, peak memory is reported as None.
"""

import argparse
import ctypes
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = [
    "BATCH",
    "BLOCK",
    "D_HEAD",
    "HEADS",
    "IMPLS",
    "LENGTHS",
    "MATERIALISING",
    "OUTLIER_FACTOR",
    "PASSES",
    "PASS_LABELS",
    "QUICK_LENGTHS",
    "RATIOS",
    "REPEATS",
    "TABLES",
    "THREAD_ENV_VARS",
    "check_agreement",
    "environment",
    "flops",
    "has_pass",
    "loglog_slope",
    "make_callables",
    "markdown",
    "measure",
    "memory_supported",
    "peak_mib",
    "predicted_mib",
    "ratios",
    "report",
    "run_subprocess",
    "set_threads",
    "spread",
    "thread_settings",
    "time_calls",
    "timed_rounds",
    "weights_mib",
]

BATCH, HEADS, D_HEAD = 1, 8, 64
LENGTHS = (128, 256, 512, 1024, 2048, 4096)
QUICK_LENGTHS = (128, 256, 512)
BLOCK = 128  # query and key block of the tiled methods
REPEATS = 7
OUTLIER_FACTOR = 2.0  # a round slower than this x the median is re-timed once
PASSES = ("forward", "backward")
PASS_LABELS = {"forward": "forward", "backward": "forward + backward"}
# (heads, n, n) float32 tables a materialising method is predicted to hold at
# its peak: forward scores and weights (2); forward + backward also the saved
# weights, their gradient and the scores' gradient (4). The measured multiples
# (peak_mib / weights_mib) are printed by the chapter and can be compared.
TABLES = {"forward": 2, "backward": 4}

# name -> (framework, kind). kind: "naive" materialises the (heads, n, n)
# weights in framework ops; "built-in" is the library call run eagerly;
# "compiled" is XLA; "tiled" is the library's flash_attention (framework ops
# over (BLOCK, BLOCK) tiles); "fused" is one kernel that never holds n x n.
IMPLS = {
    "numpy ours": ("numpy", "naive"),
    "tf ours": ("tf", "naive"),
    "tf ours XLA": ("tf", "compiled"),
    "tf tiled": ("tf", "tiled"),
    "keras.ops.dpa": ("tf", "built-in"),
    "keras.ops.dpa XLA": ("tf", "compiled"),
    "torch ours": ("torch", "naive"),
    "torch tiled": ("torch", "tiled"),
    "torch SDPA math": ("torch", "built-in"),
    "torch SDPA": ("torch", "fused"),
}
MATERIALISING = ("naive", "built-in", "compiled")
# label -> (numerator, denominator): ours / built-in, > 1 = the built-in is faster
RATIOS = {
    "torch ours / SDPA": ("torch ours", "torch SDPA"),
    "tf ours / keras.ops.dpa": ("tf ours", "keras.ops.dpa"),
    "tf ours / keras.ops.dpa XLA": ("tf ours", "keras.ops.dpa XLA"),
    "tf ours XLA / keras.ops.dpa XLA": ("tf ours XLA", "keras.ops.dpa XLA"),
}
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


def loglog_slope(ns, ys):
    """Exponent p of ys ~ ns^p, fitted by least squares on log-log axes."""
    return float(np.polyfit(np.log(ns), np.log(ys), 1)[0])


def weights_mib(n, heads=HEADS, batch=BATCH, itemsize=4):
    """Size in MiB of one (batch, heads, n, n) score or weight matrix."""
    return batch * heads * n * n * itemsize / 2**20


def predicted_mib(impl, n, pass_="forward"):
    """Predicted table memory of ``impl`` at length n: TABLES[pass_] weight
    tables for the materialising kinds, 0 for tiled and fused ones."""
    _check_pass(pass_)
    if IMPLS[impl][1] not in MATERIALISING:
        return 0.0
    return TABLES[pass_] * weights_mib(n)


def flops(n, heads=HEADS, batch=BATCH, d_head=D_HEAD, pass_="forward"):
    """Floating-point operations (multiply-adds x 2) of the matrix products:
    forward q k^T and weights @ v, 4 * batch * heads * n^2 * d; forward +
    backward adds four more products (dV, dP, dQ, dK), 12 * ... in all."""
    _check_pass(pass_)
    return (4 if pass_ == "forward" else 12) * batch * heads * n * n * d_head


def has_pass(impl, pass_):
    """Whether ``impl`` can run ``pass_`` (NumPy has no backward pass)."""
    _check_pass(pass_)
    return pass_ == "forward" or IMPLS[impl][0] != "numpy"


def _check_pass(pass_):
    if pass_ not in PASSES:
        raise ValueError(f"unknown pass {pass_!r}; choose from {PASSES}")


def inputs(n, seed=None):
    """q = k = v: float32 (batch * heads, n, d_head), seeded by n by default."""
    rng = np.random.default_rng(n if seed is None else seed)
    return rng.standard_normal((BATCH * HEADS, n, D_HEAD), dtype=np.float32)


def upstream_gradient(n):
    """The fixed dLoss/dOutputs of the backward pass, like ``inputs(n)``."""
    return inputs(n, seed=10_000 + n)


# --- threads ------------------------------------------------------------------


def _openblas():
    """(get, set) for the OpenBLAS that NumPy loaded, or None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = sorted(
        {
            line.split()[-1]
            for line in maps.splitlines()
            if "openblas" in line.split()[-1]
        }
    )
    for path in paths:
        lib = ctypes.CDLL(path)
        for prefix, suffix in (
            ("scipy_openblas", "64_"),
            ("scipy_openblas", ""),
            ("openblas", "64_"),
            ("openblas", ""),
        ):
            try:
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}")
                put = getattr(lib, f"{prefix}_set_num_threads{suffix}")
            except AttributeError:
                continue
            return get, put
    return None


def set_threads(n, frameworks=("tf", "torch")):
    """Limit NumPy's OpenBLAS, and TF / torch (imported here), to n threads.

    Sets the environment variables too, for libraries not loaded yet and for
    child processes. TensorFlow's thread pools can only be sized before it
    runs its first op; if it already has, its setting is left as it is (see
    ``thread_settings()``). Returns ``thread_settings()``.
    """
    if int(n) < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    n = int(n)
    for var in THREAD_ENV_VARS:
        os.environ[var] = str(n)
    blas = _openblas()
    if blas is not None:
        blas[1](ctypes.c_int(n))
    if "torch" in frameworks:
        _set_torch_threads(n)
    if "tf" in frameworks:
        _set_tf_threads(n)
    return thread_settings()


def _set_torch_threads(n):
    import torch

    torch.set_num_threads(n)
    if torch.get_num_interop_threads() != n:
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:  # only allowed before any inter-op work
            pass


def _set_tf_threads(n):
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(n)
    except RuntimeError:  # TF already initialised its runtime
        pass


def thread_settings():
    """The thread counts in force for NumPy (OpenBLAS), torch and TF.

    TF reports 0 for "not configured" (then TF_NUM_*_THREADS or, failing that,
    the core count applies); frameworks not imported yet are left out.
    """
    out = {"cpu_count": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        out["usable_cores"] = len(os.sched_getaffinity(0))
    blas = _openblas()
    out["numpy_openblas"] = int(blas[0]()) if blas is not None else None
    if "torch" in sys.modules:
        import torch

        out["torch_intra_op"] = torch.get_num_threads()
        out["torch_inter_op"] = torch.get_num_interop_threads()
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        out["tf_intra_op"] = tf.config.threading.get_intra_op_parallelism_threads()
        out["tf_inter_op"] = tf.config.threading.get_inter_op_parallelism_threads()
    out["env"] = {var: os.environ.get(var) for var in THREAD_ENV_VARS}
    return out


# --- what is measured ------------------------------------------------------------


def make_callables(q, impls=None, pass_="forward"):
    """name -> zero-argument callable computing attention on q = k = v.

    q: float32 array (batch * heads, n, d_head). ``pass_="forward"``: the
    callable returns the outputs (torch without autograd); ``"backward"``: it
    also runs the backward pass of the fixed upstream gradient and returns
    (dq, dk, dv). Each input is put in its framework's layout here, outside
    the timed calls. Only the frameworks the requested ``impls`` need are
    imported.
    """
    impls = list(IMPLS if impls is None else impls)
    cases = _cases(q, {pass_: impls})
    return {name: cases[(name, pass_)] for name in impls}


def _cases(q, wanted):
    """(name, pass) -> callable for ``wanted``: pass -> implementation names.
    All cases of one framework share its input tensors."""
    for pass_, impls in wanted.items():
        _check_pass(pass_)
        unknown = set(impls) - set(IMPLS)
        if unknown:
            raise ValueError(
                f"unknown implementations {sorted(unknown)}; choose from {list(IMPLS)}"
            )
        missing = [i for i in impls if not has_pass(i, pass_)]
        if missing:
            raise ValueError(f"{missing} have no {pass_} pass (NumPy has no autograd)")
    grad = upstream_gradient(q.shape[1])
    cases = {}
    for framework, make in (
        ("numpy", _numpy_callables),
        ("tf", _tf_callables),
        ("torch", _torch_callables),
    ):
        mine = {
            p: [i for i in impls if IMPLS[i][0] == framework]
            for p, impls in wanted.items()
        }
        if any(mine.values()):
            cases.update(make(q, mine, grad))
    return cases


def _numpy_callables(q, wanted, grad):
    import attncourse.numpy as anp

    k, v = q.copy(), q.copy()
    return {
        ("numpy ours", "forward"): lambda: anp.scaled_dot_product_attention(q, k, v)[0]
    }


def _tf_callables(q, wanted, grad):
    import keras
    import tensorflow as tf

    import attncourse.tf as atf

    n = q.shape[1]

    def keras_layout(x):  # (b*h, n, d) -> keras (b, n, h, d)
        return x.reshape(BATCH, HEADS, n, D_HEAD).transpose(0, 2, 1, 3)

    def ours(q, k, v):
        return atf.scaled_dot_product_attention(q, k, v)[0]

    def tiled(q, k, v):
        return atf.flash_attention(q, k, v, block_q=BLOCK, block_k=BLOCK)[0]

    def dpa(q, k, v):
        return keras.ops.dot_product_attention(q, k, v)

    # name -> (function, keras layout?, XLA?)
    specs = {
        "tf ours": (ours, False, False),
        "tf ours XLA": (ours, False, True),
        "tf tiled": (tiled, False, False),
        "keras.ops.dpa": (dpa, True, False),
        "keras.ops.dpa XLA": (dpa, True, True),
    }
    tensors = {}  # keras layout? -> (q, k, v, upstream gradient)

    def tensors_for(keras_4d):
        if keras_4d not in tensors:
            layout = keras_layout if keras_4d else (lambda x: x)
            with tf.device("/CPU:0"):
                tensors[keras_4d] = tuple(
                    tf.constant(layout(x)) for x in (q, q, q, grad)
                )
        return tensors[keras_4d]

    def on_cpu(fn, args):  # TF would place the ops on a visible GPU
        with tf.device("/CPU:0"):
            return fn(*args)

    fns = {}
    for pass_, names in wanted.items():
        for name in names:
            fn, keras_4d, xla = specs[name]
            *args, g = tensors_for(keras_4d)
            if pass_ == "backward":
                fn = _tf_backward(fn, g)
            if xla:
                fn = tf.function(fn, jit_compile=True, autograph=False)
            fns[(name, pass_)] = lambda fn=fn, args=args: on_cpu(fn, args)
    return fns


def _tf_backward(fn, grad):
    import tensorflow as tf

    def forward_backward(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = fn(q, k, v)
        return tape.gradient(out, [q, k, v], output_gradients=grad)

    return forward_backward


def _torch_callables(q, wanted, grad):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import attncourse.torch as atorch

    n = q.shape[1]

    def sdpa_layout(x):  # (b*h, n, d) -> (b, h, n, d), a view
        return x.reshape(BATCH, HEADS, n, D_HEAD)

    def ours(q, k, v):
        return atorch.scaled_dot_product_attention(q, k, v)[0]

    def tiled(q, k, v):
        return atorch.flash_attention(q, k, v, block_q=BLOCK, block_k=BLOCK)[0]

    def sdpa(q, k, v):
        q, k, v = (sdpa_layout(x) for x in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).reshape(-1, n, D_HEAD)

    def sdpa_math(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return sdpa(q, k, v)

    specs = {
        "torch ours": ours,
        "torch tiled": tiled,
        "torch SDPA math": sdpa_math,
        "torch SDPA": sdpa,
    }
    # q, k, v: (b*h, n, d) leaves shared by every case; the SDPA cases view
    # them as (b, h, n, d) inside the call (a reshape of a contiguous tensor
    # is a view: no copy). The forward pass runs without autograd.
    args = tuple(torch.from_numpy(q.copy()).requires_grad_() for _ in range(3))
    g = torch.from_numpy(grad)

    def forward(fn):
        with torch.no_grad():
            return fn(*args)

    fns = {}
    for pass_, names in wanted.items():
        for name in names:
            fn = specs[name]
            if pass_ == "forward":
                fns[(name, pass_)] = lambda fn=fn: forward(fn)
            else:
                fns[(name, pass_)] = lambda fn=fn: torch.autograd.grad(
                    fn(*args), args, g
                )
    return fns


def _as_reference_layout(name, out):
    if isinstance(out, (tuple, list)):
        return tuple(_as_reference_layout(name, x) for x in out)
    if hasattr(out, "detach"):
        out = out.detach()
    out = out.numpy() if hasattr(out, "numpy") else np.asarray(out)
    if name.startswith("keras"):
        out = out.transpose(0, 2, 1, 3)  # back to (b, h, n, d)
    return out.reshape(BATCH * HEADS, -1, D_HEAD)


def _reference(q, grad=None):
    """float64 outputs of softmax(q k^T / sqrt(d)) v with q = k = v, or (with
    an upstream gradient) the analytic gradients (dq, dk, dv)."""
    x = q.astype(np.float64)
    scale = 1 / np.sqrt(x.shape[-1])
    s = x @ x.transpose(0, 2, 1) * scale  # (b*h, n, n)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if grad is None:
        return p @ x
    g = grad.astype(np.float64)
    dv = p.transpose(0, 2, 1) @ g
    dp = g @ x.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return ds @ x * scale, ds.transpose(0, 2, 1) @ x * scale, dv


def check_agreement(fns, q, atol=1e-4, pass_="forward"):
    """Largest |difference| of every implementation from a float64 NumPy
    reference on the same q (outputs; for the backward pass dq, dk and dv);
    ValueError if any exceeds ``atol``."""
    grad = upstream_gradient(q.shape[1]) if pass_ == "backward" else None
    ref = _reference(q, grad)
    refs = (ref,) if grad is None else ref
    diffs = {}
    for name, fn in fns.items():
        got = _as_reference_layout(name, fn())
        got = (got,) if grad is None else got
        diffs[name] = max(
            float(np.abs(a - b).max()) for a, b in zip(got, refs, strict=True)
        )
    worst = max(diffs, key=diffs.get)
    if diffs[worst] > atol:
        raise ValueError(
            f"{worst} ({pass_}) disagrees with the reference at n={q.shape[1]}: "
            f"max |diff| = {diffs[worst]:.2e}"
        )
    return diffs[worst]


def time_calls(fns, repeats):
    """name -> list of ms. One warm-up call each (first-call set-up, XLA
    compilation), then ``repeats`` rounds that call every implementation once,
    so a burst of load from elsewhere hits all of them alike."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(_time_once(fn))
    return times


def _time_once(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def spread(times):
    """median_ms, q1_ms, q3_ms, iqr_ms (the interquartile range), min_ms and
    max_ms of a list of times in ms (inclusive quartiles)."""
    times = list(times)
    if len(times) > 1:
        q1, median, q3 = statistics.quantiles(times, n=4, method="inclusive")
    else:
        q1 = median = q3 = times[0]
    return {
        "median_ms": median,
        "q1_ms": q1,
        "q3_ms": q3,
        "iqr_ms": q3 - q1,
        "min_ms": min(times),
        "max_ms": max(times),
    }


def timed_rounds(fns, repeats=REPEATS, factor=OUTLIER_FACTOR):
    """``time_calls``, then every round slower than ``factor`` x its median
    re-timed once (the new time replaces it). name -> ``spread`` of the final
    times plus times_ms, retimed (how many rounds) and outliers_ms (the times
    replaced). ``factor=None``: no re-timing."""
    times = time_calls(fns, repeats)
    out = {}
    for name, ts in times.items():
        median = statistics.median(ts)
        slow = (
            []
            if factor is None
            else [i for i, t in enumerate(ts) if t > factor * median]
        )
        outliers = [ts[i] for i in slow]
        for i in slow:
            ts[i] = _time_once(fns[name])
        out[name] = {
            **spread(ts),
            "times_ms": ts,
            "retimed": len(slow),
            "outliers_ms": outliers,
        }
    return out


# --- peak memory -------------------------------------------------------------------

_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
M_MMAP_THRESHOLD = -3


def _status_kib(key):
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1))


def memory_supported():
    """True where the RSS high-water mark can be reset (Linux >= 4.0). Trying
    resets it, so the process's earlier peak is forgotten."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _LIBC is not None
    except OSError:
        return False


def _release_freed_memory():
    _LIBC.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    gc.collect()
    _LIBC.malloc_trim(0)


def peak_mib(fn):
    """Extra resident memory at the peak of one call (see the module docstring).

    Call ``fn`` once beforehand: a first call also pays for set-up and
    compilation, which is not what this measures.
    """
    _release_freed_memory()
    before = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to VmRSS
    out = fn()
    peak = _status_kib("VmHWM")
    del out
    return max(0, peak - before) / 1024


# --- runs and reports -----------------------------------------------------------------

_TIME_KEYS = (
    "median_ms",
    "q1_ms",
    "q3_ms",
    "iqr_ms",
    "min_ms",
    "max_ms",
    "times_ms",
    "retimed",
    "outliers_ms",
)


def measure(
    time_lengths=QUICK_LENGTHS,
    repeats=REPEATS,
    impls=None,
    memory_lengths=(),
    log=None,
    passes=("forward",),
    budget_mib=None,
):
    """Time every implementation and pass at ``time_lengths`` and measure its
    peak memory at ``memory_lengths``, in this process.

    passes: some of "forward", "backward" (forward + backward of a fixed
    upstream gradient w.r.t. q, k, v; NumPy has none, its backward rows are
    left out). budget_mib: cases of the materialising methods whose
    ``predicted_mib`` exceeds it are not run (status "over budget"); None: no
    budget. Returns one dict per (impl, pass, seq_len): impl, framework, kind,
    pass, seq_len, status ("ok" or "over budget"), predicted_mib, timed and
    memory_measured (whether the length was in each sweep), the timing keys of
    ``timed_rounds`` (None where not timed) and peak_mib (None where not
    measured or unsupported). ``log`` is a print-like callable for progress.
    Every case is first checked against float64 NumPy at the smallest length.
    Timing runs first: the memory pass changes malloc's settings for the rest
    of the process.
    """
    impls = list(IMPLS if impls is None else impls)
    passes = tuple(passes)
    for pass_ in passes:
        _check_pass(pass_)
    if not passes:
        raise ValueError("passes is empty: give 'forward' and/or 'backward'")
    if budget_mib is not None and budget_mib <= 0:
        raise ValueError(f"budget_mib must be > 0 or None, got {budget_mib}")
    if int(repeats) < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    # memory_supported() resets the high-water mark: only ask when measuring memory
    memory_lengths = tuple(memory_lengths)
    if memory_lengths and not memory_supported():
        memory_lengths = ()
    lengths = sorted(set(time_lengths) | set(memory_lengths))
    if not lengths:
        raise ValueError("nothing to measure: give time_lengths or memory_lengths")
    log = log or (lambda *args, **kwargs: None)
    for pass_ in passes:
        for name in impls:
            if name in IMPLS and not has_pass(name, pass_):
                log(f"{name}: no {pass_} pass (NumPy has no autograd), skipped")
    rows = {}
    for pass_ in passes:
        for n in lengths:
            for name in impls:
                if not has_pass(name, pass_):
                    continue
                predicted = predicted_mib(name, n, pass_)
                over = budget_mib is not None and predicted > budget_mib
                rows[(name, pass_, n)] = {
                    "impl": name,
                    "framework": IMPLS[name][0],
                    "kind": IMPLS[name][1],
                    "pass": pass_,
                    "seq_len": n,
                    "status": "over budget" if over else "ok",
                    "predicted_mib": predicted,
                    "timed": n in time_lengths,
                    "memory_measured": n in memory_lengths,
                    **dict.fromkeys(_TIME_KEYS),
                    "peak_mib": None,
                }
    cases = {}
    for n in lengths:
        wanted = {
            p: [i for i in impls if rows.get((i, p, n), {}).get("status") == "ok"]
            for p in passes
        }
        built = _cases(inputs(n), {p: names for p, names in wanted.items() if names})
        cases[n] = {key: built[key] for key in sorted(built, key=_case_order)}
    for pass_ in passes:
        first = {name: fn for (name, p), fn in cases[lengths[0]].items() if p == pass_}
        if first:
            worst = check_agreement(first, inputs(lengths[0]), pass_=pass_)
            log(f"{pass_}: all agree with float64 NumPy within {worst:.1e}")
    _time_all(rows, cases, sorted(time_lengths), repeats, log)
    _measure_memory(rows, cases, sorted(memory_lengths), set(time_lengths), log)
    return list(rows.values())


def _case_order(key):
    name, pass_ = key
    return PASSES.index(pass_), list(IMPLS).index(name)


def _time_all(rows, cases, lengths, repeats, log):
    """Fill the timing keys of ``rows`` at each length: interleaved rounds over
    every implementation and pass at that length."""
    for n in lengths:
        for (name, pass_), stats in timed_rounds(cases[n], repeats).items():
            rows[(name, pass_, n)].update(stats)
            again = f" ({stats['retimed']} re-timed)" if stats["retimed"] else ""
            log(
                f"n={n:5d} {pass_:8s} {name:18s} {stats['median_ms']:9.2f} ms"
                f" IQR {stats['iqr_ms']:.2f}{again}"
            )


def _measure_memory(rows, cases, lengths, timed, log):
    """Fill peak_mib of ``rows`` at each length (warming up the untimed ones)."""
    # Objects alive now stay alive: freezing them makes each case's gc.collect()
    # cheap (a full collection with TF loaded takes most of a second).
    gc.collect()
    gc.freeze()
    try:
        for n in lengths:
            for (name, pass_), fn in cases[n].items():
                if n not in timed:
                    fn()  # warm-up: set-up and XLA compilation are not the cost
                row = rows[(name, pass_, n)]
                row["peak_mib"] = peak_mib(fn)
                log(f"n={n:5d} {pass_:8s} {name:18s} {row['peak_mib']:9.1f} MiB")
    finally:
        gc.unfreeze()


def ratios(results):
    """Ours / built-in for every RATIOS pair present in ``results``, per pass:
    time (of medians from this one run) and peak memory, None where not
    measured (or over budget)."""
    by = {(r["impl"], r.get("pass", "forward"), r["seq_len"]): r for r in results}
    out = []
    for pass_ in PASSES:
        for n in sorted({r["seq_len"] for r in results}):
            for label, (ours, builtin) in RATIOS.items():
                if (ours, pass_, n) not in by or (builtin, pass_, n) not in by:
                    continue
                a, b = by[(ours, pass_, n)], by[(builtin, pass_, n)]
                t = m = None
                if a["median_ms"] is not None and b["median_ms"]:
                    t = a["median_ms"] / b["median_ms"]
                if a["peak_mib"] is not None and b["peak_mib"]:
                    m = a["peak_mib"] / b["peak_mib"]
                out.append(
                    {
                        "seq_len": n,
                        "pass": pass_,
                        "ratio": label,
                        "time": t,
                        "memory": m,
                    }
                )
    return out


def _time_cell(row):
    if row is None:
        return ""
    if row.get("status") == "over budget":
        return "over budget"
    if row["median_ms"] is None:
        return ""
    cell = f"{row['median_ms']:.2f}"
    if row.get("iqr_ms") is not None and row["median_ms"] > 0:
        cell += f" ({row['iqr_ms'] / row['median_ms']:.0%})"
    return cell


def _memory_cell(row):
    if row is None:
        return ""
    if row.get("status") == "over budget":
        return "over budget"
    return "" if row["peak_mib"] is None else f"{row['peak_mib']:.1f}"


def _table_note(key, pass_, rows, budget_mib):
    label = PASS_LABELS[pass_].capitalize()
    if key == "median_ms":
        timed = [r for r in rows if r["median_ms"] is not None]
        repeats = max((len(r["times_ms"] or ()) for r in timed), default=0)
        retimed = sum(r.get("retimed") or 0 for r in timed)
        note = (
            f"{label}: scaled dot-product attention on CPU, batch {BATCH}, "
            f"{HEADS} heads, d_head {D_HEAD}, float32, no mask. Median time "
            f"in ms of one call over {repeats} interleaved rounds; in brackets "
            "the interquartile range as a fraction of the median; "
            f"{retimed} round(s) over {OUTLIER_FACTOR:g}x the median re-timed "
            "once. Ratios are ours / built-in (> 1: the built-in is faster)."
        )
    else:
        note = (
            f"{label}: peak extra resident memory of one call in MiB "
            "(VmHWM - VmRSS), gradients included for the backward pass; "
            "'weights' is the size of one float32 (heads, n, n) weight matrix."
        )
    if budget_mib is not None and any(r["status"] == "over budget" for r in rows):
        note += (
            f" 'over budget': predicted table memory over {budget_mib:g} MiB, not run."
        )
    if pass_ == "backward":
        note += " NumPy has no backward pass."
    return note


def markdown(results, ratio_rows=None, budget_mib=None):
    """Markdown tables per pass: median ms (spread) and time ratios; peak MiB
    and memory ratios. Over-budget cases read "over budget"."""
    ratio_rows = ratios(results) if ratio_rows is None else ratio_rows
    lines = []
    for pass_ in PASSES:
        rows = [r for r in results if r.get("pass", "forward") == pass_]
        if not rows:
            continue
        by = {(r["impl"], r["seq_len"]): r for r in rows}
        rat = {
            (r["ratio"], r["seq_len"]): r
            for r in ratio_rows
            if r.get("pass", "forward") == pass_
        }
        impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
        labels = [k for k in RATIOS if any(r == k for r, _ in rat)]
        for key, swept in (("median_ms", "timed"), ("peak_mib", "memory_measured")):
            lengths = sorted(
                {
                    r["seq_len"]
                    for r in rows
                    if r[key] is not None
                    or (r.get("status") == "over budget" and r.get(swept, True))
                }
            )
            if lengths:
                lines += [
                    _table_note(key, pass_, rows, budget_mib),
                    "",
                    *_table(by, rat, impls, labels, lengths, key),
                    "",
                ]
    return "\n".join(lines)


def _table(by, rat, impls, labels, lengths, key):
    """The lines of one markdown table: a row per length, a column per
    implementation and per ratio (plus the weights' size for memory)."""
    memory = key == "peak_mib"
    head = ["n", *(["weights"] if memory else []), *impls, *labels]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cell = _memory_cell if memory else _time_cell
    unit = "memory" if memory else "time"
    for n in lengths:
        cells = [f"{weights_mib(n):.0f}"] if memory else []
        cells += [cell(by.get((i, n))) for i in impls]
        for k in labels:
            value = rat[(k, n)][unit] if (k, n) in rat else None
            cells.append(
                "" if value is None else f"{value:{'.1f' if memory else '.2f'}}"
            )
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def environment(repeats=None, memory=False, passes=("forward",), budget_mib=None):
    """Versions, threads, load average and method, for the report."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for module in ("tensorflow", "keras", "torch"):
        if module in sys.modules:
            versions[module] = sys.modules[module].__version__
    return {
        "shape": {"batch": BATCH, "heads": HEADS, "d_head": D_HEAD},
        "dtype": "float32",
        "mask": None,
        "block": BLOCK,
        "passes": list(passes),
        "budget_mib": budget_mib,
        "tables_predicted": TABLES,
        "repeats": repeats,
        "statistic": (
            f"median of {repeats} interleaved rounds after one warm-up call; "
            "spread: interquartile range (q1_ms, q3_ms, inclusive quartiles) "
            f"and min/max; rounds over {OUTLIER_FACTOR:g}x the median re-timed "
            "once (retimed, outliers_ms)"
        ),
        "load_average_1_5_15min": os.getloadavg(),
        "memory_method": (
            "VmHWM after one warm call minus VmRSS before it, "
            "high-water mark reset via /proc/self/clear_refs, "
            "mallopt(M_MMAP_THRESHOLD, 64 KiB) + malloc_trim "
            "between cases"
            if memory
            else "not measured"
        ),
        "platform": platform.platform(),
        "versions": versions,
        "threads": thread_settings(),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
    }


def report(
    time_lengths=QUICK_LENGTHS,
    repeats=REPEATS,
    impls=None,
    memory_lengths=(),
    threads=1,
    log=None,
    passes=("forward",),
    budget_mib=None,
):
    """set_threads(threads), measure(...), and a JSON-ready report: environment
    (load average before and after), results, ratios, skipped (cases that
    cannot run, such as NumPy's backward pass), seconds, markdown."""
    impls = list(IMPLS if impls is None else impls)
    frameworks = {IMPLS[i][0] for i in impls if i in IMPLS} & {"tf", "torch"}
    if threads is not None:
        set_threads(threads, frameworks)
    load_before = os.getloadavg()
    start = time.perf_counter()
    results = measure(
        time_lengths, repeats, impls, memory_lengths, log, passes, budget_mib
    )
    ratio_rows = ratios(results)
    memory = any(r["peak_mib"] is not None for r in results)
    env = environment(repeats, memory, passes, budget_mib)
    env["load_average_at_start"] = load_before
    skipped = [
        f"{i} {p}: NumPy has no autograd"
        for p in passes
        for i in impls
        if i in IMPLS and not has_pass(i, p)
    ]
    return {
        "environment": env,
        "results": results,
        "ratios": ratio_rows,
        "skipped": skipped,
        "seconds": round(time.perf_counter() - start, 1),
        "markdown": markdown(results, ratio_rows, budget_mib),
    }


def run_subprocess(
    time_lengths=(),
    repeats=REPEATS,
    impls=None,
    memory_lengths=(),
    threads=1,
    passes=("forward",),
    budget_mib=None,
    progress=False,
    timeout=900,
):
    """``report(...)`` computed in a fresh Python process; returns its dict.

    The child starts with the thread environment variables set, so every
    library loads with ``threads`` threads, and its memory pass leaves this
    process untouched. ``progress=True`` lets the child's progress lines
    through to this process's stderr.
    """
    spec = {
        "time_lengths": list(time_lengths),
        "repeats": repeats,
        "impls": list(IMPLS if impls is None else impls),
        "memory_lengths": list(memory_lengths),
        "threads": threads,
        "passes": list(passes),
        "budget_mib": budget_mib,
        "progress": progress,
    }
    env = dict(os.environ)
    if threads is not None:
        env.update({var: str(threads) for var in THREAD_ENV_VARS})
    done = subprocess.run(
        [sys.executable, "-m", "attncourse.benchmark", json.dumps(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=None if progress else subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        tail = (done.stderr or "")[-3000:]
        raise RuntimeError(f"benchmark process failed ({done.returncode}):\n{tail}")
    return json.loads(done.stdout)


def main(argv=None):
    """Child entry: ``python -m attncourse.benchmark '<json spec>'`` prints the
    report of ``report(**spec)`` as JSON on stdout (progress on stderr)."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument(
        "spec",
        help="JSON: time_lengths, repeats, impls, memory_lengths, threads, "
        "passes, budget_mib, progress",
    )
    spec = json.loads(parser.parse_args(argv).spec)
    show = spec.pop("progress", False)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if show else None
    json.dump(report(**spec, log=log), sys.stdout)


if __name__ == "__main__":
    main()
