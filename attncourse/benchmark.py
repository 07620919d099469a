"""Time and peak memory of from-scratch attention vs the fused built-ins, on CPU.

The measuring core of ``bench/attention_speed.py`` (``make bench``) and of the
chapter "What attention costs". Use it in-process::

    from attncourse import benchmark
    benchmark.set_threads(1)
    rows = benchmark.measure(time_lengths=(128, 256), repeats=5,
                             impls=["torch ours", "torch SDPA"])

or in a fresh process, which leaves the caller's allocator, thread pools and
memory high-water mark untouched (``python -m attncourse.benchmark`` is that
child and prints its report as JSON)::

    report = benchmark.run_subprocess(memory_lengths=(512, 1024), threads=1)

What runs: softmax(q k^T / sqrt(d)) v without a mask, batch 1, 8 heads of
d_head 64 (d_model 512, the Transformer-base size), float32, q = k = v.

* ``numpy ours``, ``tf ours``, ``torch ours`` -- the course's
  ``scaled_dot_product_attention``; it materialises the (heads, n, n) weights,
  as the chapters' code does. ``tf ours XLA`` is the same function under
  ``tf.function(jit_compile=True)``.
* ``keras.ops.dpa`` -- ``keras.ops.dot_product_attention``. TensorFlow has no
  fused attention op, so on the TF backend it is einsum -> softmax -> einsum
  (its ``flash_attention=True`` raises on this backend). ``keras.ops.dpa XLA``
  compiles it with XLA; on CPU its peak memory still grows like two
  (heads, n, n) arrays, so it is "compiled", not "fused" in the
  flash-attention sense (the memory columns show it).
* ``torch SDPA`` -- ``torch.nn.functional.scaled_dot_product_attention``; on
  CPU it dispatches to a flash-attention kernel that streams over blocks of
  keys and never holds the n x n matrix. ``torch SDPA math`` forces the same
  function onto its reference "math" backend (``sdpa_kernel(SDPBackend.MATH)``),
  which does materialise the weights: same API, different kernel.

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
then the median of ``repeats`` rounds, each calling every implementation once
(so load from other processes hits them alike), all in one process. TF and
torch run eagerly on CPU, where their ops finish before returning, so wall time
is compute time. Reports record the machine's load average: on a shared
machine, compare ratios from one run rather than times across runs.

Peak memory: tracemalloc cannot see TF's or torch's C++ allocations, so the
resident set size is measured instead. Before each case the process's RSS
high-water mark is reset (writing 5 to /proc/self/clear_refs, Linux >= 4.0),
then one (warm) call runs; "peak MiB" = VmHWM after the call - VmRSS before
it: the extra memory the call touched at its peak, output included, inputs
not. For that pass glibc is told to serve every allocation >= 64 KiB with its
own mmap (mallopt M_MMAP_THRESHOLD) and ``malloc_trim`` runs between cases, so
freed buffers go back to the OS and are not silently reused by the next case.
Both settings stay in force in the measuring process afterwards (and the reset
high-water mark hides earlier peaks from tools such as ``time -v``), which is
why ``run_subprocess`` exists. Where clear_refs is not writable, peak memory is
reported as None.
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
    "D_HEAD",
    "HEADS",
    "IMPLS",
    "LENGTHS",
    "QUICK_LENGTHS",
    "RATIOS",
    "THREAD_ENV_VARS",
    "check_agreement",
    "environment",
    "flops",
    "make_callables",
    "markdown",
    "measure",
    "memory_supported",
    "peak_mib",
    "ratios",
    "report",
    "run_subprocess",
    "set_threads",
    "thread_settings",
    "time_calls",
    "weights_mib",
]

BATCH, HEADS, D_HEAD = 1, 8, 64
LENGTHS = (128, 256, 512, 1024, 2048)
QUICK_LENGTHS = (128, 256, 512)

# name -> (framework, kind). kind: "naive" materialises the (heads, n, n)
# weights in framework ops; "built-in" is the library call run eagerly;
# "compiled" is XLA; "fused" never holds the n x n matrix.
IMPLS = {
    "numpy ours": ("numpy", "naive"),
    "tf ours": ("tf", "naive"),
    "tf ours XLA": ("tf", "compiled"),
    "keras.ops.dpa": ("tf", "built-in"),
    "keras.ops.dpa XLA": ("tf", "compiled"),
    "torch ours": ("torch", "naive"),
    "torch SDPA math": ("torch", "built-in"),
    "torch SDPA": ("torch", "fused"),
}
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


def weights_mib(n, heads=HEADS, batch=BATCH, itemsize=4):
    """Size in MiB of one (batch, heads, n, n) score or weight matrix."""
    return batch * heads * n * n * itemsize / 2**20


def flops(n, heads=HEADS, batch=BATCH, d_head=D_HEAD):
    """Multiply-adds x 2 of q k^T and weights @ v: 4 * batch * heads * n^2 * d."""
    return 4 * batch * heads * n * n * d_head


def inputs(n, seed=None):
    """q = k = v: float32 (batch * heads, n, d_head), seeded by n by default."""
    rng = np.random.default_rng(n if seed is None else seed)
    return rng.standard_normal((BATCH * HEADS, n, D_HEAD), dtype=np.float32)


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


def make_callables(q, impls=None):
    """name -> zero-argument callable computing attention on q = k = v.

    q: float32 array (batch * heads, n, d_head). Each input is put in its
    framework's layout here, outside the timed calls. Only the frameworks the
    requested ``impls`` need are imported.
    """
    impls = list(IMPLS if impls is None else impls)
    unknown = set(impls) - set(IMPLS)
    if unknown:
        raise ValueError(
            f"unknown implementations {sorted(unknown)}; choose from {list(IMPLS)}"
        )
    needed = {IMPLS[name][0] for name in impls}
    fns = {}
    for framework, make in (
        ("numpy", _numpy_callables),
        ("tf", _tf_callables),
        ("torch", _torch_callables),
    ):
        if framework in needed:
            fns.update(make(q))
    return {name: fns[name] for name in impls}


def _numpy_callables(q):
    import attncourse.numpy as anp

    return {"numpy ours": lambda: anp.scaled_dot_product_attention(q, q, q)[0]}


def _tf_callables(q):
    import keras
    import tensorflow as tf

    import attncourse.tf as atf

    n = q.shape[1]
    tq = tf.constant(q)  # (b*h, n, d)
    tq4 = tf.constant(
        q.reshape(BATCH, HEADS, n, D_HEAD).transpose(0, 2, 1, 3)  # keras: (b, n, h, d)
    )

    def ours_tf(x):
        return atf.scaled_dot_product_attention(x, x, x)[0]

    def keras_dpa(x):
        return keras.ops.dot_product_attention(x, x, x)

    ours_xla = tf.function(ours_tf, jit_compile=True, autograph=False)
    keras_xla = tf.function(keras_dpa, jit_compile=True, autograph=False)
    return {
        "tf ours": lambda: ours_tf(tq),
        "tf ours XLA": lambda: ours_xla(tq),
        "keras.ops.dpa": lambda: keras_dpa(tq4),
        "keras.ops.dpa XLA": lambda: keras_xla(tq4),
    }


def _torch_callables(q):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import attncourse.torch as atorch

    pq = torch.from_numpy(q)  # (b*h, n, d)
    pq4 = pq.reshape(BATCH, HEADS, q.shape[1], D_HEAD)  # (b, h, n, d)

    def sdpa_math():
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(pq4, pq4, pq4)

    return {
        "torch ours": lambda: atorch.scaled_dot_product_attention(pq, pq, pq)[0],
        "torch SDPA math": sdpa_math,
        "torch SDPA": lambda: F.scaled_dot_product_attention(pq4, pq4, pq4),
    }


def _as_reference_layout(name, out):
    out = out.numpy() if hasattr(out, "numpy") else np.asarray(out)
    if name.startswith("keras"):
        out = out.transpose(0, 2, 1, 3)  # back to (b, h, n, d)
    return out.reshape(BATCH * HEADS, -1, D_HEAD)


def check_agreement(fns, q, atol=1e-4):
    """Largest |difference| of every implementation from a float64 NumPy
    reference on the same q; ValueError if any exceeds ``atol``."""
    import attncourse.numpy as anp

    q64 = q.astype(np.float64)
    ref = anp.scaled_dot_product_attention(q64, q64, q64)[0]
    diffs = {
        name: float(np.abs(_as_reference_layout(name, fn()) - ref).max())
        for name, fn in fns.items()
    }
    worst = max(diffs, key=diffs.get)
    if diffs[worst] > atol:
        raise ValueError(
            f"{worst} disagrees with the reference at n={q.shape[1]}: "
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
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


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


def measure(
    time_lengths=QUICK_LENGTHS, repeats=5, impls=None, memory_lengths=(), log=None
):
    """Time every implementation at ``time_lengths`` and measure its peak
    memory at ``memory_lengths``, in this process.

    Returns one dict per (impl, seq_len): impl, framework, kind, seq_len,
    median_ms / min_ms / times_ms (None where not timed), peak_mib (None where
    not measured or unsupported). ``log`` is a print-like callable for
    progress. All implementations are first checked against a float64 NumPy
    reference at the smallest length. Timing runs first: the memory pass
    changes malloc's settings for the rest of the process.
    """
    impls = list(IMPLS if impls is None else impls)
    # memory_supported() resets the high-water mark: only ask when measuring memory
    memory_lengths = tuple(memory_lengths)
    if memory_lengths and not memory_supported():
        memory_lengths = ()
    lengths = sorted(set(time_lengths) | set(memory_lengths))
    if not lengths:
        raise ValueError("nothing to measure: give time_lengths or memory_lengths")
    log = log or (lambda *args, **kwargs: None)
    cases = {n: make_callables(inputs(n), impls) for n in lengths}
    worst = check_agreement(cases[lengths[0]], inputs(lengths[0]))
    log(f"all implementations agree with float64 NumPy within {worst:.1e}")
    rows = {
        (name, n): {
            "impl": name,
            "framework": IMPLS[name][0],
            "kind": IMPLS[name][1],
            "seq_len": n,
            "median_ms": None,
            "min_ms": None,
            "times_ms": None,
            "peak_mib": None,
        }
        for n in lengths
        for name in impls
    }
    _time_all(rows, cases, sorted(time_lengths), repeats, log)
    _measure_memory(rows, cases, sorted(memory_lengths), set(time_lengths), log)
    return list(rows.values())


def _time_all(rows, cases, lengths, repeats, log):
    """Fill median_ms, min_ms and times_ms of ``rows`` at each length."""
    for n in lengths:
        for name, times in time_calls(cases[n], repeats).items():
            rows[(name, n)].update(
                median_ms=statistics.median(times), min_ms=min(times), times_ms=times
            )
            log(f"n={n:5d} {name:18s} {statistics.median(times):9.2f} ms")


def _measure_memory(rows, cases, lengths, timed, log):
    """Fill peak_mib of ``rows`` at each length (warming up the untimed ones)."""
    # Objects alive now stay alive: freezing them makes each case's gc.collect()
    # cheap (a full collection with TF loaded takes most of a second).
    gc.collect()
    gc.freeze()
    try:
        for n in lengths:
            for name, fn in cases[n].items():
                if n not in timed:
                    fn()  # warm-up: set-up and XLA compilation are not the cost
                rows[(name, n)]["peak_mib"] = peak_mib(fn)
                log(f"n={n:5d} {name:18s} {rows[(name, n)]['peak_mib']:9.1f} MiB")
    finally:
        gc.unfreeze()


def ratios(results):
    """Ours / built-in for every RATIOS pair present in ``results``: time (of
    medians from this one run) and peak memory, None where not measured."""
    by = {(r["impl"], r["seq_len"]): r for r in results}
    out = []
    for n in sorted({r["seq_len"] for r in results}):
        for label, (ours, builtin) in RATIOS.items():
            if (ours, n) not in by or (builtin, n) not in by:
                continue
            a, b = by[(ours, n)], by[(builtin, n)]
            t = m = None
            if a["median_ms"] is not None and b["median_ms"]:
                t = a["median_ms"] / b["median_ms"]
            if a["peak_mib"] is not None and b["peak_mib"]:
                m = a["peak_mib"] / b["peak_mib"]
            out.append({"seq_len": n, "ratio": label, "time": t, "memory": m})
    return out


def _cells(values, fmt):
    return ["" if v is None else format(v, fmt) for v in values]


_TABLE_NOTES = {
    "median_ms": (
        f"Scaled dot-product attention on CPU, batch {BATCH}, {HEADS} "
        f"heads, d_head {D_HEAD}, float32, no mask. Median time in ms "
        "of one call; ratios are ours / built-in (> 1: the built-in "
        "is faster)."
    ),
    "peak_mib": (
        "Peak extra resident memory of one call in MiB (VmHWM - VmRSS);"
        " 'weights' is the size of one float32 (heads, n, n) weight "
        "matrix."
    ),
}


def markdown(results, ratio_rows=None):
    """Markdown tables: median ms and time ratios; peak MiB and memory ratios."""
    ratio_rows = ratios(results) if ratio_rows is None else ratio_rows
    by = {(r["impl"], r["seq_len"]): r for r in results}
    rat = {(r["ratio"], r["seq_len"]): r for r in ratio_rows}
    impls = [i for i in IMPLS if any(r["impl"] == i for r in results)]
    labels = [k for k in RATIOS if any(r["ratio"] == k for r in ratio_rows)]
    lines = []
    for key, unit, fmt in (("median_ms", "time", ".2f"), ("peak_mib", "memory", ".1f")):
        lengths = sorted({n for (_, n), r in by.items() if r[key] is not None})
        if lengths:
            lines += [
                _TABLE_NOTES[key],
                "",
                *_table(by, rat, impls, labels, lengths, key, unit, fmt),
                "",
            ]
    return "\n".join(lines)


def _table(by, rat, impls, labels, lengths, key, unit, fmt):
    """The lines of one markdown table: a row per length, a column per
    implementation and per ratio (plus the weights' size for memory)."""
    memory = key == "peak_mib"
    head = ["n", *(["weights"] if memory else []), *impls, *labels]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in lengths:
        cells = [f"{weights_mib(n):.0f}"] if memory else []
        cells += _cells([by[(i, n)][key] if (i, n) in by else None for i in impls], fmt)
        cells += _cells(
            [rat[(k, n)][unit] if (k, n) in rat else None for k in labels],
            ".1f" if memory else ".2f",
        )
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def environment(repeats=None, memory=False):
    """Versions, threads, load average and method, for the report."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for module in ("tensorflow", "keras", "torch"):
        if module in sys.modules:
            versions[module] = sys.modules[module].__version__
    return {
        "shape": {"batch": BATCH, "heads": HEADS, "d_head": D_HEAD},
        "dtype": "float32",
        "mask": None,
        "repeats": repeats,
        "statistic": "median of repeats after one warm-up call",
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
    repeats=5,
    impls=None,
    memory_lengths=(),
    threads=1,
    log=None,
):
    """set_threads(threads), measure(...), and a JSON-ready report: environment
    (load average before and after), results, ratios, seconds, markdown."""
    impls = list(IMPLS if impls is None else impls)
    frameworks = {IMPLS[i][0] for i in impls} & {"tf", "torch"}
    if threads is not None:
        set_threads(threads, frameworks)
    load_before = os.getloadavg()
    start = time.perf_counter()
    results = measure(time_lengths, repeats, impls, memory_lengths, log)
    ratio_rows = ratios(results)
    memory = any(r["peak_mib"] is not None for r in results)
    env = environment(repeats, memory)
    env["load_average_at_start"] = load_before
    return {
        "environment": env,
        "results": results,
        "ratios": ratio_rows,
        "seconds": round(time.perf_counter() - start, 1),
        "markdown": markdown(results, ratio_rows),
    }


def run_subprocess(
    time_lengths=(),
    repeats=5,
    impls=None,
    memory_lengths=(),
    threads=1,
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
        help="JSON: time_lengths, repeats, impls, memory_lengths, threads, progress",
    )
    spec = json.loads(parser.parse_args(argv).spec)
    show = spec.pop("progress", False)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if show else None
    json.dump(report(**spec, log=log), sys.stdout)


if __name__ == "__main__":
    main()
