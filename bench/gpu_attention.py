"""The course's Triton FlashAttention-2 kernel vs PyTorch's kernels, on a GPU.

    python bench/gpu_attention.py --out _build/bench/gpu_attention.json [--quick]
        [--record]

CUDA only: without a CUDA device (or without Triton) it prints why it skips
and exits 0. On a GPU it times, for float32 and bfloat16, causal and not,
d = 64 and 128, n = 1k ... 32k (``--quick``: 1k and 4k), one batch of 8
heads, the forward pass and forward + backward (gradients of sum(out * g)
with respect to q, k, v) of:

* ``triton`` -- ``attncourse.triton_flash.flash_attention_triton``;
* ``sdpa flash``, ``sdpa efficient``, ``sdpa math`` --
  ``F.scaled_dot_product_attention`` forced onto one backend each with
  ``sdpa_kernel`` (flash has no float32: that row says "unsupported");
* ``ours naive`` -- ``attncourse.torch.scaled_dot_product_attention`` (it
  materialises the (heads, n, n) weights);
* ``ours tiled`` -- ``attncourse.torch.flash_attention`` with 256-blocks, a
  Python loop over tiles; only up to n = 4096 (a call takes seconds beyond).

Materialising methods are skipped where their predicted (heads, n, n)
tables exceed ``--budget-gib`` (default 16); a method that runs out of
memory anyway says so. Each case: warm-up calls, then the median of
``--repeats`` (default 20) calls timed with CUDA events (the spread is the
interquartile range); TFLOP/s counts 4 n^2 d flops per head for the forward
pass (half of it when causal) and 2.5x that for the backward pass (five
matrix products instead of two, FlashAttention-2's convention); peak memory
is ``torch.cuda.max_memory_allocated`` above the inputs during one call.
Before timing, every method is checked against ``sdpa math`` in float32 at
n = 1024. TF32 stays off (PyTorch's default for matmuls): float32 is float32.
Writes JSON + markdown (device, driver, CUDA, torch and Triton versions, the
date); ``--record`` also copies the JSON to ``bench/results/<gpu>.json``,
the file the attention-kernel chapter reads.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import measure  # bench/ is not a package: the script's folder

try:  # before torch and TensorFlow: see attncourse/triton_flash.py
    from attncourse import triton_flash
except ImportError as error:  # no Triton here (it is pinned for Linux x86_64)
    triton_flash, IMPORT_ERROR = None, error
else:
    IMPORT_ERROR = None

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import attncourse.torch as atorch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH, HEADS = 1, 8
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
QUICK_LENGTHS = (1024, 4096)
HEAD_SIZES = (64, 128)
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
PASSES = ("forward", "forward+backward")
METHODS = (
    "triton",
    "sdpa flash",
    "sdpa efficient",
    "sdpa math",
    "ours naive",
    "ours tiled",
)
MATERIALISING = {"sdpa math", "ours naive"}
TILED_MAX_N, TILED_BLOCK = 4096, 256
BACKENDS = {
    "sdpa flash": SDPBackend.FLASH_ATTENTION,
    "sdpa efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa math": SDPBackend.MATH,
}
WARMUP = 3


def skip_reason() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    if triton_flash is None:
        return f"Triton is not importable ({IMPORT_ERROR})"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


def attention_fn(method, causal, d):
    """fn(q, k, v) -> outputs for q, k, v of shape (batch, heads, n, d)."""
    if method == "triton":
        return lambda q, k, v: triton_flash.flash_attention_triton(
            q, k, v, causal=causal
        )[0]
    if method in BACKENDS:

        def sdpa(q, k, v, backend=BACKENDS[method]):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return sdpa

    def folded(q, k, v):  # the library is (batch, n, d): heads into the batch
        b, h, n, _ = q.shape
        q, k, v = (x.reshape(b * h, n, d) for x in (q, k, v))
        if method == "ours naive":
            mask = atorch.causal_mask(n).to(q.device) if causal else None
            out = atorch.scaled_dot_product_attention(q, k, v, mask)[0]
        else:
            out = atorch.flash_attention(
                q, k, v, causal=causal, block_q=TILED_BLOCK, block_k=TILED_BLOCK
            )[0]
        return out.reshape(b, h, n, d)

    return folded


def make_call(method, pass_, causal, q, k, v, grad):
    fn = attention_fn(method, causal, q.shape[-1])
    if pass_ == "forward":
        return lambda: fn(q, k, v)
    return lambda: torch.autograd.grad(fn(q, k, v), (q, k, v), grad)


def inputs(n, d, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (BATCH, HEADS, n, d)
    q, k, v, g = (
        torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(4)
    )
    return (*(x.requires_grad_() for x in (q, k, v)), g)


def flops(n, d, causal, pass_):
    forward = 4 * BATCH * HEADS * n * n * d * (0.5 if causal else 1.0)
    return forward * (1.0 if pass_ == "forward" else 3.5)


def table_gib(n, dtype, pass_):
    """Predicted memory of the (heads, n, n) tables a materialising method
    keeps: scores and weights (forward), their gradients too (backward)."""
    tables = 2 if pass_ == "forward" else 4
    return tables * BATCH * HEADS * n * n * torch.finfo(dtype).bits / 8 / 2**30


def time_call(call, repeats):
    """Median and interquartile range (ms) of ``repeats`` CUDA-event timings."""
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()  # without it the time is the launch only
        times.append(start.elapsed_time(end))
    q1, _, q3 = statistics.quantiles(times, n=4)
    return statistics.median(times), q3 - q1


def peak_mib(call):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def check_agreement(methods):
    """Max |difference| of each method's outputs and gradients from sdpa math,
    float32, n = 1024, d = 64, causal and not."""
    errors = {}
    for causal in (False, True):
        q, k, v, g = inputs(1024, 64, torch.float32, seed=1)
        ref = make_call("sdpa math", "forward+backward", causal, q, k, v, g)
        ref_out = attention_fn("sdpa math", causal, 64)(q, k, v)
        expected = (ref_out, *ref())
        for method in methods:
            if method == "sdpa flash":  # no float32
                continue
            out = attention_fn(method, causal, 64)(q, k, v)
            got = (out, *make_call(method, "forward+backward", causal, q, k, v, g)())
            err = max(
                (a - b).abs().max().item() for a, b in zip(got, expected, strict=True)
            )
            errors[f"{method}, causal={causal}"] = err
    return errors


def run_case(method, pass_, dtype_name, causal, d, n, repeats, budget_gib):
    row = {"method": method, "pass": pass_, "dtype": dtype_name, "causal": causal}
    row |= {"d": d, "n": n}
    dtype = DTYPES[dtype_name]
    if method == "sdpa flash" and dtype == torch.float32:
        return row | {"status": "unsupported (float32)"}
    if method == "ours tiled" and n > TILED_MAX_N:
        return row | {"status": f"not run (n > {TILED_MAX_N})"}
    if method in MATERIALISING and table_gib(n, dtype, pass_) > budget_gib:
        return row | {"status": "over budget"}
    q, k, v, g = inputs(n, d, dtype)
    call = make_call(method, pass_, causal, q, k, v, g)
    try:
        median_ms, iqr_ms = time_call(call, repeats)
        memory = peak_mib(call)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return row | {"status": "out of memory"}
    except Exception as error:  # noqa: BLE001 -- recorded, the run goes on
        # e.g. no SDPA kernel for this backend and shape, or Triton's
        # OutOfResources (shared memory) for a block size and head size
        first = (str(error).splitlines() or [""])[0][:80]
        return row | {"status": f"error: {type(error).__name__}: {first}"}
    tflops = flops(n, d, causal, pass_) / (median_ms * 1e-3) / 1e12
    return row | {
        "status": "ok",
        "median_ms": median_ms,
        "iqr_ms": iqr_ms,
        "tflops": tflops,
        "peak_mib": memory,
    }


def device_info():
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = None
    return {
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_flash.triton.__version__,
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    }


def markdown(report):
    dev = report["device"]
    lines = [
        f"# Attention on {dev['name']} ({report['machine']['timestamp']})",
        "",
        f"driver {dev['driver']}, CUDA {dev['cuda']}, torch {dev['torch']}, "
        f"Triton {dev['triton']}; batch {BATCH}, {HEADS} heads; median of "
        f"{report['repeats']} calls (ms), TFLOP/s, peak MiB above the inputs.",
        "",
        "| pass | dtype | causal | d | n | method | ms | TFLOP/s | MiB | x triton |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_case = {}
    for row in report["rows"]:
        key = tuple(row[k] for k in ("pass", "dtype", "causal", "d", "n"))
        by_case.setdefault(key, []).append(row)
    for key, rows in by_case.items():
        ours = next((r for r in rows if r["method"] == "triton"), {})
        for r in rows:
            cells = [*map(str, key), r["method"]]
            if r["status"] != "ok":
                cells += [r["status"], "", "", ""]
            else:
                ratio = (
                    f"{r['median_ms'] / ours['median_ms']:.2f}"
                    if ours.get("status") == "ok"
                    else ""
                )
                cells += [
                    f"{r['median_ms']:.3f}",
                    f"{r['tflops']:.1f}",
                    f"{r['peak_mib']:.0f}",
                    ratio,
                ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Agreement with sdpa math (float32, n = 1024, max |diff|):", ""]
    lines += [f"- {k}: {v:.2e}" for k, v in report["agreement"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("_build/bench/gpu_attention.json")
    )
    parser.add_argument("--quick", action="store_true", help="n = 1k and 4k only")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--budget-gib", type=float, default=16.0)
    parser.add_argument(
        "--record", action="store_true", help="also write bench/results/<gpu>.json"
    )
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"bench-gpu: skipped -- {reason}. It needs an NVIDIA GPU with CUDA.")
        return 0
    if args.repeats < 20:
        parser.error("--repeats: at least 20 timed calls per case")
    began = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, made sure
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    report = {
        "device": device_info(),
        "machine": measure.machine_info(("torch", "triton")),
        "repeats": args.repeats,
        "batch": BATCH,
        "heads": HEADS,
        "agreement": check_agreement(METHODS),
        "rows": [],
    }
    for pass_ in PASSES:
        for dtype_name in DTYPES:
            for causal in (False, True):
                for d in HEAD_SIZES:
                    for n in lengths:
                        for method in METHODS:
                            row = run_case(
                                method, pass_, dtype_name, causal, d, n,
                                args.repeats, args.budget_gib,
                            )  # fmt: skip
                            report["rows"].append(row)
                            print(json.dumps(row), flush=True)
    report["seconds"] = round(time.perf_counter() - began, 1)
    measure.write_report(args.out, report, markdown(report))
    if args.record:
        slug = re.sub(r"[^a-z0-9]+", "-", report["device"]["name"].lower()).strip("-")
        path = ROOT / "bench" / "results" / f"{slug}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
