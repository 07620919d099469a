"""From-scratch scaled dot-product attention vs the built-ins, on CPU.

    python bench/attention_speed.py --out _build/bench/attention_speed.json [--quick]

writes the JSON report and a markdown table beside it (same name, ``.md``).
Times every implementation at sequence lengths 128 ... 2048 (``--quick``:
128 ... 512) and measures its peak memory at the same lengths, with one CPU
thread per framework by default. What runs, and how time and memory are
measured, is described in ``attncourse.benchmark``, which holds the code (the
chapter "What attention costs" calls it too); this file is the command line.

The measurement runs in a child process (``benchmark.run_subprocess``), which
starts with the thread environment variables already set, so NumPy, TF and
torch each load with the requested number of threads.
"""

import argparse
from pathlib import Path

import measure  # bench/ is not a package: the script's folder

from attncourse import benchmark


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("_build/bench/attention_speed.json")
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"lengths {benchmark.QUICK_LENGTHS} only (under a minute)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed calls per case (default 5, --quick 3)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads per framework (default 1)"
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    lengths = benchmark.QUICK_LENGTHS if args.quick else benchmark.LENGTHS

    report = benchmark.run_subprocess(
        time_lengths=lengths,
        repeats=repeats,
        memory_lengths=lengths,
        threads=args.threads,
        progress=True,
    )
    table = report.pop("markdown")
    measure.write_report(args.out, report, table)


if __name__ == "__main__":
    main()
