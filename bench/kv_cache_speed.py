"""Time per generated token with and without a KV cache, and GQA cache sizes.

    python bench/kv_cache_speed.py --out _build/bench/kv_cache_speed.json [--quick]

writes the JSON report and a markdown table beside it (same name, ``.md``).
One decoding step of ``attncourse.{tf,torch}.decode_step`` (batch 1, d_model 64,
2 heads, float32, one CPU thread) at context lengths 64 ... 4096 (``--quick``:
64 ... 1024): "cached" appends one token to a cache of n tokens, "uncached"
reruns the causal pass over all n + 1 tokens. --repeats rounds, each timing
every call once in a fresh random order, after one warm-up; the table and
slopes use the fastest call (the medians are in the JSON). The slope is the
least-squares fit of log(time) on log(n) over the three longest lengths
(about 1 = linear, 2 = quadratic growth per step).
The cache sizes are kv_cache_bytes for a 32-layer model with 32 query heads of
128 features, 4096 tokens, float16, for G = 32 (MHA), 8, 4 (GQA) and 1 (MQA).
"""

import argparse
import functools
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import attncourse.numpy as anp  # noqa: E402

HEADS, KV_HEADS, WIDTH = 2, 2, 64


def timed_rounds(calls: dict, repeats: int, seed: int = 0) -> dict:
    """{key: (fastest, median) seconds}: every call once per round, in a fresh
    random order each round (a fixed order lets one length always run right
    after the slowest and inherit its cache misses), after one warm-up each."""
    for fn in calls.values():
        fn()
    order = list(calls)
    rng = np.random.default_rng(seed)
    times = {key: [] for key in order}
    for _ in range(repeats):
        rng.shuffle(order)
        for key in order:
            start = time.perf_counter()
            calls[key]()
            times[key].append(time.perf_counter() - start)
    return {k: (float(np.min(t)), float(np.median(t))) for k, t in times.items()}


def step_times(framework, lengths, repeats):
    """{n: ((fastest, median) cached, (fastest, median) uncached)} seconds."""
    if framework == "tf":
        import tensorflow as tf

        import attncourse.tf as lib

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        convert = lambda a: tf.constant(a, tf.float32)  # noqa: E731
    else:
        import torch

        import attncourse.torch as lib

        torch.set_num_threads(1)
        torch.set_grad_enabled(False)
        convert = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    np.random.seed(0)
    params = anp.GroupedQueryAttention(HEADS, KV_HEADS, WIDTH).params
    p = {k: convert(v) for k, v in params.items()}
    x = np.random.default_rng(0).normal(size=(1, max(lengths) + 1, WIDTH))
    calls = {}
    for n in lengths:
        xs = convert(x[:, : n + 1])
        _, cache = lib.decode_step(xs[:, :n], p, HEADS, KV_HEADS)
        new = xs[:, n:]
        step = functools.partial(lib.decode_step, new, p, HEADS, KV_HEADS, cache)
        calls[n, "cached"] = step
        calls[n, "uncached"] = functools.partial(
            lib.decode_step, xs, p, HEADS, KV_HEADS
        )
    times = timed_rounds(calls, repeats)
    return {n: (times[n, "cached"], times[n, "uncached"]) for n in lengths}


def slope(lengths, times):
    return float(np.polyfit(np.log(lengths[-3:]), np.log(times[-3:]), 1)[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("_build/bench/kv_cache_speed.json")
    )
    parser.add_argument("--quick", action="store_true", help="lengths up to 1024")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--frameworks", nargs="+", default=["torch", "tf"])
    args = parser.parse_args(argv)
    lengths = [64 * 2**i for i in range(5 if args.quick else 7)]
    report = {"lengths": lengths, "repeats": args.repeats, "frameworks": {}}
    lines = [
        "| framework | n | cached (ms) | uncached (ms) | speed-up |",
        "|---" * 5 + "|",
    ]
    for fw in args.frameworks:
        times = step_times(fw, lengths, args.repeats)
        cached = [times[n][0][0] for n in lengths]
        uncached = [times[n][1][0] for n in lengths]
        report["frameworks"][fw] = {
            "cached_s": cached,
            "uncached_s": uncached,
            "cached_median_s": [times[n][0][1] for n in lengths],
            "uncached_median_s": [times[n][1][1] for n in lengths],
            "slope_cached": slope(lengths, cached),
            "slope_uncached": slope(lengths, uncached),
        }
        for n, c, u in zip(lengths, cached, uncached, strict=True):
            lines.append(
                f"| {fw} | {n} | {1e3 * c:.2f} | {1e3 * u:.2f} | {u / c:.0f}x |"
            )
        r = report["frameworks"][fw]
        lines.append(
            f"| {fw} | slope | {r['slope_cached']:.2f} | {r['slope_uncached']:.2f} | |"
        )
    report["cache_bytes_32x32x128_4096_fp16"] = {
        g: anp.kv_cache_bytes(32, g, 128, 4096, dtype_bytes=2) for g in (32, 8, 4, 1)
    }
    lines += ["", "| G | KV cache (MiB), 32 layers, 4096 tokens, fp16 |", "|---|---|"]
    for g, b in report["cache_bytes_32x32x128_4096_fp16"].items():
        lines.append(f"| {g} | {b / 2**20:.0f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
