"""The benchmark harness measures what it says (tiny sizes; no timing asserts)."""

import math
import sys

import pytest

from attncourse import benchmark

IMPLS = ["numpy ours", "torch ours", "torch SDPA"]


def test_measure_checks_agreement_and_fills_every_row():
    rows = benchmark.measure(time_lengths=(16, 32), repeats=2, impls=IMPLS)
    assert {(r["impl"], r["seq_len"]) for r in rows} == {
        (i, n) for i in IMPLS for n in (16, 32)
    }
    for row in rows:
        assert row["median_ms"] > 0 and len(row["times_ms"]) == 2
        assert row["min_ms"] <= row["median_ms"]


def test_ratios_divide_ours_by_the_builtin():
    rows = benchmark.measure(time_lengths=(16,), repeats=1, impls=IMPLS)
    (ratio,) = [r for r in benchmark.ratios(rows) if r["ratio"] == "torch ours / SDPA"]
    by = {r["impl"]: r["median_ms"] for r in rows}
    assert math.isclose(ratio["time"], by["torch ours"] / by["torch SDPA"])
    table = benchmark.markdown(rows)
    assert "torch ours / SDPA" in table and "| 16 |" in table


def test_weight_table_size_is_quadratic():
    assert benchmark.weights_mib(2048) == 4 * benchmark.weights_mib(1024)


def test_subprocess_report_measures_memory_growth():
    report = benchmark.run_subprocess(
        memory_lengths=(256, 512), impls=["torch ours"], timeout=300
    )
    peaks = {r["seq_len"]: r["peak_mib"] for r in report["results"]}
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS is measured on Linux only (/proc/self/clear_refs)")
    # On Linux the peak must be measured: a None here is the bug, not a skip.
    assert benchmark.memory_supported(), "cannot reset the RSS high-water mark"
    assert None not in peaks.values(), peaks
    # The naive version holds the (heads, n, n) table: doubling n roughly
    # quadruples its extra memory (allow wide margins for allocator noise).
    assert peaks[512] > 2 * peaks[256]
