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
        assert row["pass"] == "forward" and row["status"] == "ok"
        assert row["median_ms"] > 0 and len(row["times_ms"]) == 2
        assert row["min_ms"] <= row["q1_ms"] <= row["median_ms"] <= row["q3_ms"]
        assert row["q3_ms"] <= row["max_ms"]
        assert row["iqr_ms"] == pytest.approx(row["q3_ms"] - row["q1_ms"])
        assert row["retimed"] == len(row["outliers_ms"])


def test_ratios_divide_ours_by_the_builtin():
    rows = benchmark.measure(time_lengths=(16,), repeats=1, impls=IMPLS)
    (ratio,) = [r for r in benchmark.ratios(rows) if r["ratio"] == "torch ours / SDPA"]
    by = {r["impl"]: r["median_ms"] for r in rows}
    assert math.isclose(ratio["time"], by["torch ours"] / by["torch SDPA"])
    table = benchmark.markdown(rows)
    assert "torch ours / SDPA" in table and "| 16 |" in table


def test_weight_table_size_is_quadratic():
    assert benchmark.weights_mib(2048) == 4 * benchmark.weights_mib(1024)


def test_backward_pass_rows_and_numpy_has_none():
    impls = [*IMPLS, "torch tiled"]
    rows = benchmark.measure(
        time_lengths=(24,), repeats=2, impls=impls, passes=("forward", "backward")
    )
    keys = {(r["impl"], r["pass"]) for r in rows}
    assert ("numpy ours", "forward") in keys
    assert ("numpy ours", "backward") not in keys  # NumPy has no autograd
    for impl in impls[1:]:
        assert {(impl, "forward"), (impl, "backward")} <= keys
    assert all(len(r["times_ms"]) == 2 for r in rows)
    table = benchmark.markdown(rows)
    assert "Forward + backward" in table and "NumPy has no backward pass" in table
    with pytest.raises(ValueError, match="no backward pass"):
        benchmark.make_callables(benchmark.inputs(8), ["numpy ours"], "backward")
    with pytest.raises(ValueError, match="unknown pass"):
        benchmark.measure(time_lengths=(8,), repeats=1, impls=IMPLS, passes=("up",))


@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_tiled_methods_agree_with_the_reference(pass_):
    # 40 is not a multiple of the block; one block of 128 covers it, so also
    # try a length of several blocks
    for n in (40, benchmark.BLOCK * 2 + 8):
        fns = benchmark.make_callables(
            benchmark.inputs(n), ["tf tiled", "torch tiled"], pass_
        )
        assert benchmark.check_agreement(fns, benchmark.inputs(n), pass_=pass_) < 1e-4


def test_budget_skips_only_the_materialising_methods():
    impls = ["torch ours", "torch SDPA math", "torch tiled", "torch SDPA"]
    n = 64
    budget = 1.5 * benchmark.weights_mib(n)  # forward (2 tables) is over it
    rows = benchmark.measure(
        time_lengths=(16, n),
        repeats=1,
        impls=impls,
        passes=("forward", "backward"),
        budget_mib=budget,
    )
    by = {(r["impl"], r["pass"], r["seq_len"]): r for r in rows}
    for pass_ in ("forward", "backward"):
        for impl in ("torch ours", "torch SDPA math"):
            over = by[(impl, pass_, n)]
            assert over["status"] == "over budget" and over["median_ms"] is None
            assert over["predicted_mib"] > budget
            assert by[(impl, pass_, 16)]["status"] == "ok"
        for impl in ("torch tiled", "torch SDPA"):
            assert by[(impl, pass_, n)]["status"] == "ok"
            assert by[(impl, pass_, n)]["median_ms"] > 0
    assert "over budget" in benchmark.markdown(rows, budget_mib=budget)
    with pytest.raises(ValueError, match="budget_mib"):
        benchmark.measure(time_lengths=(8,), repeats=1, impls=IMPLS, budget_mib=0)


def test_predicted_memory_flops_and_passes():
    n = 512
    assert benchmark.predicted_mib("torch ours", n) == 2 * benchmark.weights_mib(n)
    assert benchmark.predicted_mib("tf ours XLA", n, "backward") == (
        benchmark.TABLES["backward"] * benchmark.weights_mib(n)
    )
    assert benchmark.predicted_mib("torch SDPA", n, "backward") == 0
    assert benchmark.predicted_mib("tf tiled", n) == 0
    assert benchmark.flops(n, pass_="backward") == 3 * benchmark.flops(n)
    assert not benchmark.has_pass("numpy ours", "backward")
    assert benchmark.has_pass("tf tiled", "backward")
    assert {benchmark.IMPLS[i][1] for i in ("tf tiled", "torch tiled")} == {"tiled"}


def test_spread_is_the_interquartile_range():
    stats = benchmark.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert stats["median_ms"] == 3.0
    assert (stats["q1_ms"], stats["q3_ms"], stats["iqr_ms"]) == (2.0, 4.0, 2.0)
    assert (stats["min_ms"], stats["max_ms"]) == (1.0, 5.0)
    assert benchmark.spread([7.0])["iqr_ms"] == 0


def test_a_slow_round_is_retimed_once(monkeypatch):
    # a fake clock (the warm-up call is not timed): about 1 ms a round but
    # 50 ms for the third, so the test does not depend on the machine's load
    durations = iter([1.1, 0.9, 50.0, 1.0, 1.2, 1.0, 0.8, 1.05])
    calls = []

    def fake_time_once(fn):
        fn()
        return next(durations)

    monkeypatch.setattr(benchmark, "_time_once", fake_time_once)
    stats = benchmark.timed_rounds({"f": lambda: calls.append(1)}, repeats=7)["f"]
    assert len(calls) == 1 + 7 + 1  # warm-up, 7 rounds, one re-timed call
    assert stats["retimed"] == 1 and stats["outliers_ms"] == [50.0]
    assert stats["times_ms"] == [1.1, 0.9, 1.05, 1.0, 1.2, 1.0, 0.8]
    assert stats["median_ms"] == 1.0 and stats["max_ms"] == 1.2
    durations = iter([1.0, 50.0, 1.0])
    unchanged = benchmark.timed_rounds({"f": lambda: None}, 3, factor=None)["f"]
    assert unchanged["retimed"] == 0 and unchanged["max_ms"] == 50.0


def test_subprocess_report_measures_memory_growth():
    report = benchmark.run_subprocess(
        memory_lengths=(256, 512),
        impls=["torch ours", "torch SDPA"],
        passes=("forward", "backward"),
        timeout=300,
    )
    peaks = {
        (r["impl"], r["pass"], r["seq_len"]): r["peak_mib"] for r in report["results"]
    }
    assert report["environment"]["passes"] == ["forward", "backward"]
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS is measured on Linux only (/proc/self/clear_refs)")
    # On Linux the peak must be measured: a None here is the bug, not a skip.
    assert benchmark.memory_supported(), "cannot reset the RSS high-water mark"
    assert None not in peaks.values(), peaks
    # The naive version holds the (heads, n, n) table: doubling n roughly
    # quadruples its extra memory (allow wide margins for allocator noise),
    # and the backward pass keeps more than the forward pass.
    for pass_ in ("forward", "backward"):
        assert peaks[("torch ours", pass_, 512)] > 2 * peaks[("torch ours", pass_, 256)]
    table = benchmark.weights_mib(512)
    assert (
        peaks[("torch ours", "backward", 512)] > peaks[("torch ours", "forward", 512)]
    )
    assert peaks[("torch SDPA", "backward", 512)] < table  # fused: no n x n table


def test_tf_cases_run_on_the_cpu_even_where_a_gpu_is_visible():
    pytest.importorskip("tensorflow")
    fns = benchmark.make_callables(
        benchmark.inputs(16), ["tf ours", "tf tiled", "keras.ops.dpa"], "backward"
    )
    for name, fn in fns.items():
        assert all("CPU" in g.device for g in fn()), name
