"""From-scratch scaled dot-product attention vs the built-ins, on CPU.

    python bench/attention_speed.py --out _build/bench/attention_speed.json [--quick]

writes the JSON report and a markdown table beside it (same name, ``.md``).
Times every implementation, forward and forward + backward (the gradients
w.r.t. q, k and v of a fixed upstream gradient; NumPy has no backward pass),
at sequence lengths 128 ... 4096 (``--quick``: 128 ... 512), and measures its
peak memory at the same lengths, with one CPU thread per framework by default.
Methods that build the (heads, n, n) table are not run where their predicted
table memory exceeds ``--budget-mib`` (default 512 MiB: the naive ones stop at
n = 2048, the tiled and fused ones go on); the tables mark those cases "over
budget". Time is the median of ``--repeats`` (default 7) interleaved rounds,
with the interquartile range as the spread and rounds over 2x the median
re-timed once. What runs, and how time and memory are measured, is described
in ``attncourse.benchmark``, which holds the code (the chapters "What
attention costs" and "Tiled attention" call it too); this file is the command
line.

The measurement runs in a child process (``benchmark.run_subprocess``), which
starts with the thread environment variables already set, so NumPy, TF and
torch each load with the requested number of threads.
"""

import argparse
from pathlib import Path

import measure  # bench/ is not a package: the script's folder

from attncourse import benchmark

BUDGET_MIB = 512


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("_build/bench/attention_speed.json")
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"lengths {benchmark.QUICK_LENGTHS} only (about a minute)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"timed rounds per case (default {benchmark.REPEATS}, --quick 3)",
    )
    parser.add_argument(
        "--budget-mib",
        type=float,
        default=BUDGET_MIB,
        help="skip materialising methods whose predicted tables exceed this "
        f"(MiB, default {BUDGET_MIB}; 0: no budget)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads per framework (default 1)"
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else benchmark.REPEATS)
    lengths = benchmark.QUICK_LENGTHS if args.quick else benchmark.LENGTHS

    report = benchmark.run_subprocess(
        time_lengths=lengths,
        repeats=repeats,
        memory_lengths=lengths,
        threads=args.threads,
        passes=benchmark.PASSES,
        budget_mib=args.budget_mib or None,
        progress=True,
        timeout=3600,
    )
    table = report.pop("markdown")
    measure.write_report(args.out, report, table)


if __name__ == "__main__":
    main()
