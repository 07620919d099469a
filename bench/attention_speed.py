"""From-scratch scaled dot-product attention vs fused built-ins, on CPU.

    python bench/attention_speed.py --out _build/bench/attention_speed.json [--quick]

writes the JSON and a markdown table beside it (same name, ``.md``).

What runs: softmax(q k^T / sqrt(d)) v without a mask, batch 1, 8 heads of
d_head 64 (d_model 512, the Transformer-base size), float32, for sequence
lengths 128 ... 2048 (``--quick``: 128 ... 512).

* naive -- the course's ``scaled_dot_product_attention`` in NumPy, TensorFlow
  (eager, and compiled with XLA) and PyTorch: the (heads, n, n) weights are
  materialised, as the chapters' code does;
* fused -- ``torch.nn.functional.scaled_dot_product_attention`` (a fused CPU
  kernel that never holds the full weight matrix) and, for TensorFlow, which
  has no fused attention op in ``tf.nn``, ``keras.ops.dot_product_attention``:
  on the TF backend it is einsum -> softmax -> einsum (not fused) unless
  compiled, so it is timed eagerly and under ``tf.function(jit_compile=True)``,
  where XLA fuses it.

Threads: every framework gets the same number of CPU threads, 1 by default
(``--threads``). On a small shared machine several multi-threaded runtimes in
one process (OpenBLAS, Eigen, OpenMP) fight over the cores and spin-wait on
each other; one thread each gives stable, comparable numbers.

Time: one warm-up call per case (it also compiles XLA), then the median of
``--repeats`` rounds, each calling every implementation once (so load from
other processes hits them alike), all in this one process. TF and torch
run eagerly on CPU, where their ops finish before returning, so wall time is
compute time. The JSON records the machine's load average: on a shared
machine, compare ratios from one run rather than times across runs.

Peak memory: tracemalloc cannot see TF's or torch's C++ allocations, so the
resident set size is measured instead. Before each case the kernel's RSS
high-water mark is reset (writing 5 to /proc/self/clear_refs, Linux >= 4.0),
then one call runs; "peak MiB" = VmHWM after the call - VmRSS before it: the
extra memory the call touched at its peak, output included. For that pass
glibc is told to serve every allocation >= 64 KiB with its own mmap (mallopt
M_MMAP_THRESHOLD) and ``malloc_trim`` runs between cases, so freed buffers go
back to the OS and are not silently reused by the next case. Where
clear_refs is not writable, peak memory is reported as null.
"""

import argparse
import ctypes
import gc
import importlib
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

BATCH, HEADS, D_HEAD = 1, 8, 64
LENGTHS = (128, 256, 512, 1024, 2048)
QUICK_LENGTHS = (128, 256, 512)

# name -> (framework, kind); kind "naive" materialises the weights
IMPLS = {
    "numpy ours": ("numpy", "naive"),
    "tf ours": ("tf", "naive"),
    "tf ours XLA": ("tf", "naive"),
    "keras.ops.dpa": ("tf", "built-in"),
    "keras.ops.dpa XLA": ("tf", "fused"),
    "torch ours": ("torch", "naive"),
    "torch SDPA": ("torch", "fused"),
}
# naive / fused pairs for the ratio columns
RATIOS = {"torch ours / SDPA": ("torch ours", "torch SDPA"),
          "tf ours / keras.ops.dpa XLA": ("tf ours", "keras.ops.dpa XLA"),
          "tf ours XLA / keras.ops.dpa XLA": ("tf ours XLA", "keras.ops.dpa XLA")}


def make_callables(q):
    """name -> zero-argument callable computing attention on q = k = v.

    q: float32 array (batch * heads, n, d_head). Every input is prepared in
    its framework's layout here, outside the timed calls.
    """
    import keras
    import tensorflow as tf
    import torch
    import torch.nn.functional as F

    import attncourse.numpy as anp
    import attncourse.tf as atf
    import attncourse.torch as atorch

    n = q.shape[1]
    tq = tf.constant(q)
    tq4 = tf.constant(q.reshape(BATCH, HEADS, n, D_HEAD).transpose(0, 2, 1, 3))
    pq = torch.from_numpy(q)
    pq4 = pq.reshape(BATCH, HEADS, n, D_HEAD)

    def ours_tf(x):
        return atf.scaled_dot_product_attention(x, x, x)[0]

    def keras_dpa(x):  # keras layout (batch, n, heads, d_head)
        return keras.ops.dot_product_attention(x, x, x)

    ours_xla = tf.function(ours_tf, jit_compile=True, autograph=False)
    keras_xla = tf.function(keras_dpa, jit_compile=True, autograph=False)
    return {
        "numpy ours": lambda: anp.scaled_dot_product_attention(q, q, q)[0],
        "tf ours": lambda: ours_tf(tq),
        "tf ours XLA": lambda: ours_xla(tq),
        "keras.ops.dpa": lambda: keras_dpa(tq4),
        "keras.ops.dpa XLA": lambda: keras_xla(tq4),
        "torch ours": lambda: atorch.scaled_dot_product_attention(pq, pq, pq)[0],
        "torch SDPA": lambda: F.scaled_dot_product_attention(pq4, pq4, pq4),
    }


def to_numpy(x):
    x = x.numpy() if hasattr(x, "numpy") else x
    return x.reshape(BATCH * HEADS, -1, D_HEAD) if x.ndim == 3 else x


def check_agreement(fns, n):
    """All implementations compute the same thing (keras' layout put back)."""
    ref = to_numpy(fns["numpy ours"]())
    worst = 0.0
    for name, fn in fns.items():
        out = fn()
        out = out.numpy() if hasattr(out, "numpy") else out
        if name.startswith("keras"):
            out = out.transpose(0, 2, 1, 3)
        out = out.reshape(ref.shape)
        worst = max(worst, float(abs(out - ref).max()))
    if worst > 1e-4:
        sys.exit(f"implementations disagree at n={n}: max |diff| = {worst}")
    return worst


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


# --- peak memory ----------------------------------------------------------------

_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
M_MMAP_THRESHOLD = -3


def _status_kib(key):
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1))


def memory_supported():
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _LIBC is not None
    except OSError:
        return False


def release_freed_memory():
    _LIBC.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    gc.collect()
    _LIBC.malloc_trim(0)


def peak_mib(fn):
    """Extra resident memory at the peak of one call (see module docstring)."""
    release_freed_memory()
    before = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to VmRSS
    out = fn()
    peak = _status_kib("VmHWM")
    del out
    return max(0, peak - before) / 1024


# --- report -----------------------------------------------------------------------


def inputs(n):
    import numpy as np

    rng = np.random.default_rng(n)
    return rng.standard_normal((BATCH * HEADS, n, D_HEAD), dtype=np.float32)


def run(lengths, repeats):
    """Time every case, then (a separate pass, other malloc settings) memory."""
    cases = {n: make_callables(inputs(n)) for n in lengths}
    print(f"all implementations agree within "
          f"{check_agreement(cases[lengths[0]], lengths[0]):.1e}")
    results = []
    for n, fns in cases.items():
        for name, times in time_calls(fns, repeats).items():
            results.append({"impl": name, "framework": IMPLS[name][0],
                            "kind": IMPLS[name][1], "seq_len": n,
                            "median_ms": statistics.median(times),
                            "min_ms": min(times), "times_ms": times})
            print(f"n={n:5d} {name:20s} {results[-1]['median_ms']:9.2f} ms",
                  flush=True)
    measure_memory = memory_supported()
    if measure_memory:
        rows = {(r["impl"], r["seq_len"]): r for r in results}
        for n, fns in cases.items():
            for name, fn in fns.items():
                rows[(name, n)]["peak_mib"] = peak_mib(fn)
    return results, measure_memory


def ratios(results):
    by = {(r["impl"], r["seq_len"]): r for r in results}
    out = []
    for n in sorted({r["seq_len"] for r in results}):
        for label, (naive, fused) in RATIOS.items():
            a, b = by[(naive, n)], by[(fused, n)]
            mem = None
            if a.get("peak_mib") is not None and b.get("peak_mib"):
                mem = a["peak_mib"] / b["peak_mib"]
            out.append({"seq_len": n, "ratio": label,
                        "time": a["median_ms"] / b["median_ms"], "memory": mem})
    return out


def markdown(results, ratio_rows):
    by = {(r["impl"], r["seq_len"]): r for r in results}
    rat = {(r["ratio"], r["seq_len"]): r for r in ratio_rows}
    lengths = sorted({r["seq_len"] for r in results})
    head = ["n", *IMPLS, *RATIOS]
    lines = [
        f"Scaled dot-product attention on CPU, batch {BATCH}, {HEADS} heads, "
        f"d_head {D_HEAD}, float32, no mask. Median time in ms; ratios are "
        f"naive / fused (> 1: the fused built-in is faster).", "",
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in lengths:
        cells = [f"{by[(i, n)]['median_ms']:.2f}" for i in IMPLS]
        cells += [f"{rat[(r, n)]['time']:.2f}" for r in RATIOS]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if all(r.get("peak_mib") is not None for r in results):
        lines += ["", "Peak extra resident memory of one call in MiB (VmHWM - "
                  "VmRSS); 'weights' is the size of one float32 (heads, n, n) "
                  "weight matrix.", "",
                  "| n | weights | " + " | ".join(IMPLS) + " | torch ours / SDPA |",
                  "|" + "---|" * (len(IMPLS) + 3)]
        for n in lengths:
            w = BATCH * HEADS * n * n * 4 / 2**20
            cells = [f"{by[(i, n)]['peak_mib']:.1f}" for i in IMPLS]
            m = rat[("torch ours / SDPA", n)]["memory"]
            ratio = "n/a" if m is None else f"{m:.1f}"
            lines.append(f"| {n} | {w:.0f} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


def environment(repeats, memory):
    import keras
    import numpy as np
    import tensorflow as tf
    import torch

    return {
        "shape": {"batch": BATCH, "heads": HEADS, "d_head": D_HEAD},
        "dtype": "float32", "mask": None, "repeats": repeats,
        "statistic": "median of repeats after one warm-up call",
        "load_average_1_5_15min_at_end": os.getloadavg(),
        "memory_method": ("VmHWM after one call minus VmRSS before it, "
                          "high-water mark reset via /proc/self/clear_refs, "
                          "mallopt(M_MMAP_THRESHOLD, 64 KiB) + malloc_trim "
                          "between cases" if memory else "unavailable"),
        "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "numpy": np.__version__,
        "tensorflow": tf.__version__, "keras": keras.__version__,
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
    }


def limit_threads(n):
    """Give every framework the same n threads. The environment variables
    must be set before NumPy (OpenBLAS), TF or torch is first imported."""
    if any(m in sys.modules for m in ("numpy", "tensorflow", "torch")):
        raise RuntimeError("limit_threads must run before numpy, TF or torch load")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ[var] = str(n)
    importlib.import_module("attncourse")  # quiets TensorFlow before its import
    import tensorflow as tf
    import torch

    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)
    torch.set_num_threads(n)
    torch.set_num_interop_threads(n)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path("_build/bench/attention_speed.json"))
    parser.add_argument("--quick", action="store_true",
                        help=f"lengths {QUICK_LENGTHS} only (under a minute)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed calls per case (default 5, --quick 3)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads per framework (default 1)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    limit_threads(args.threads)

    start = time.perf_counter()
    results, memory = run(QUICK_LENGTHS if args.quick else LENGTHS, repeats)
    ratio_rows = ratios(results)
    report = {"environment": environment(repeats, memory), "results": results,
              "ratios": ratio_rows,
              "seconds": round(time.perf_counter() - start, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(results, ratio_rows)
    args.out.with_suffix(".md").write_text(table)
    print("\n" + table)
    print(f"wrote {args.out} and {args.out.with_suffix('.md')} "
          f"in {report['seconds']} s")


if __name__ == "__main__":
    main()
