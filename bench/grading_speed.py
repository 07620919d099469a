"""What sandboxed autograding on Dask costs, and how grading scales with workers.

    python bench/grading_speed.py [--out _build/bench/grading_speed.json]
        [--assignments a,b] [--copies 2] [--skip-bare] [--skip-parallel]
        [--skip-straggler] [--skip-overhead] [--only-parallel] [--keep DIR]

Writes the JSON report and a markdown table beside it (same name, ``.md``).
Everything is measured in one run, on temporary copies of the course (the
repository is not touched). ``python -m grader grade`` sends one Dask task per
staged submission to an embedded ``LocalCluster`` of ``--workers``
single-threaded worker processes (``grader.dispatch``):

1. **bare execution vs grading** (``--skip-bare``) -- every assignment's source
   notebook (the reference solution with its hidden tests) run by nbclient in a
   plain local kernel, one after the other, with the thread setting the
   student kernels get (one thread unless OMP_NUM_THREADS etc. are set); then
   one student who submitted the reference solution of every assignment,
   graded with ``--workers 1``: the whole run (references check, generate,
   stage, autograde, feedback, export) against the bare execution -- target
   at most 1.15x -- and the autograde step's ratio, with its breakdown per
   notebook from the grading report (sandboxed kernel start, cells, checks)
   and the share of the Dask task and of nbgrader around the notebooks;
2. **throughput** (``--skip-parallel``) -- ``--copies`` students per
   assignment (the reference solution and the blank release, alternating)
   graded with ``--workers 1`` and then ``--workers 2`` on two fresh course
   copies: submissions per minute of each, their ratio (target at least
   1.9x), and a check that both runs graded every submission exactly once
   with the same scores;
3. **straggler** (``--skip-straggler``) -- 14 submissions of one assignment
   (``--straggler-assignment``, reference and blank alternating), one of them
   a correct solution that sleeps 60 s in a solution cell, graded with
   ``--workers 2 --cell-timeout 120`` on Dask's dynamic queue: the makespan
   (the autograde step) and each submission's task seconds (the ``cluster``
   section of its grading log). From the same measured task seconds: the
   makespan the old static split would have had (round-robin partition of
   the submissions sorted by (assignment, student) into one part per worker,
   each part graded in turn; it no longer exists, so this is computed, not
   run) and the ideal ``max(slowest task, sum of tasks / workers)``;
4. **scheduler overhead** (``--skip-overhead``) -- ``--overhead-tasks`` no-op
   tasks (``client.map``, ``pure=False``) on a ``LocalCluster(n_workers=2,
   threads_per_worker=1)``: milliseconds per task;
5. **estimate** -- the wall time of grading 10,000 notebooks on a 64-core
   Slurm allocation (64 single-threaded workers), from the mean task seconds
   measured here and the scheduler overhead (assumptions in the markdown).
"""

import argparse
import csv
import datetime
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import measure  # noqa: E402  (bench/ is not a package: the script's folder)

from grader import events  # noqa: E402
from grader import notebooks as nbs  # noqa: E402
from grader.assignments import ASSIGNMENTS  # noqa: E402
from grader.locks import kernel_env  # noqa: E402
from grader.nbgrader_cli import path_with_this_python  # noqa: E402

QUIET = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONHASHSEED": "0",
}
# what a course copy must not inherit: another gradebook, cluster or course
NOT_INHERITED = (
    "GRADER_REFERENCE",
    "GRADER_SCHEDULER",
    "GRADER_COURSE_ROOT",
    "NBGRADER_DB_URL",
)
TARGETS = {"grade_all / bare": 1.15, "2 workers / 1 worker": 1.9}
STRAGGLER = {"submissions": 14, "sleep": 60, "workers": 2, "cell_timeout": 120}
ESTIMATE = {"notebooks": 10_000, "workers": 64}
PROGRESS = re.compile(
    r"^\[(\d+)/(\d+)\] (\S+)/(\S+): graded on (\S+) in ([\d.]+) s", re.M
)


# -- 1. bare execution ------------------------------------------------------
def run_bare(path: Path, timeout: int = 600) -> dict:
    """Execute one notebook in a plain kernel; seconds per phase."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        shutdown_kernel="immediate",
    )
    code = [
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()
    ]
    t0 = time.perf_counter()
    with client.setup_kernel():
        t1 = time.perf_counter()
        first = None
        for i in code:
            client.execute_cell(nb.cells[i], i)
            if first is None:
                first = time.perf_counter() - t1
            errors = [o for o in nb.cells[i].outputs if o.output_type == "error"]
            if errors:
                raise RuntimeError(
                    f"{path.name} cell {i}: {errors[0].ename}: {errors[0].evalue}"
                )
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return {
        "kernel_start": t1 - t0,
        "first_cell": first,
        "cells": t2 - t1,
        "kernel_stop": t3 - t2,
        "total": t3 - t0,
    }


def bare_execution(assignments, work: Path) -> list[dict]:
    rows = []
    for a in assignments:
        folder = work / "bare" / a
        shutil.copytree(
            ROOT / "solutions" / a,
            folder,
            ignore=shutil.ignore_patterns("grader-errors.log"),
        )
        print(f"bare: {a} ...", flush=True)
        rows.append({"assignment": a, **run_bare(folder / f"{a}.ipynb")})
    return rows


# -- grading a course copy ----------------------------------------------------
def sleeper(solutions: dict, seconds: int) -> dict:
    """The solution cells with a ``time.sleep(seconds)`` before the first."""
    out = dict(solutions)
    first = next(iter(out))
    out[first] = f"import time\ntime.sleep({seconds})\n" + out[first]
    return out


def make_course(dest: Path, assignments, students: dict, sleep: int = 0) -> int:
    """A course copy; ``students`` maps a student id to "reference", "blank"
    or "sleeper" (the reference solution that first sleeps ``sleep`` s).
    Returns the number of submissions."""
    dest.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", dest)
    for package in ("attncourse", "grader"):
        shutil.copytree(
            ROOT / package,
            dest / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
    count = 0
    for a in assignments:
        shutil.copytree(
            ROOT / "solutions" / a,
            dest / "solutions" / a,
            ignore=shutil.ignore_patterns("grader-errors.log"),
        )
        release = nbs.read(ROOT / "exercises" / a / f"{a}.ipynb")
        solutions = nbs.solution_cells(nbs.read(ROOT / "solutions" / a / f"{a}.ipynb"))
        kinds = {
            "reference": nbs.submission(release, solutions),
            "blank": release,
            "sleeper": nbs.submission(release, sleeper(solutions, sleep)),
        }
        for student, kind in students.items():
            nbs.write(kinds[kind], dest / "submitted" / student / a / f"{a}.ipynb")
            count += 1
    return count


def grade(root: Path, workers: int, *extra: str) -> dict:
    """``python -m grader grade --workers N`` in a course copy; its wall time,
    report, grades and the seconds of each submission's Dask task."""
    env = {**os.environ, **QUIET, "PYTHONPATH": str(root)}
    for name in NOT_INHERITED:
        env.pop(name, None)
    env["PATH"] = path_with_this_python(env.get("PATH", ""))
    command = [sys.executable, "-m", "grader", "grade", "--workers", str(workers)]
    start = time.perf_counter()
    with open(root / "grade_all.log", "w") as log:
        code = subprocess.run(
            [*command, *extra],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    wall = time.perf_counter() - start
    text = (root / "grade_all.log").read_text()
    if code:
        raise RuntimeError(f"grade_all failed in {root} (exit {code}):\n{text[-3000:]}")
    report = json.loads((root / "grading-report.json").read_text())
    with open(root / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    return {
        "wall": wall,
        "report": report,
        "grades": [(r["assignment"], r["student_id"], float(r["score"])) for r in rows],
        "tasks": task_seconds(root, report, text),
    }


def task_seconds(root: Path, report: dict, log: str) -> dict:
    """{(assignment, student): {"seconds", "worker"}}: the task time from each
    submission's grading log (section "cluster"), the worker (and the time
    where the log has none) from the progress lines."""
    progress = {
        (m[4], m[3]): {"worker": m[5], "seconds": float(m[6])}
        for m in PROGRESS.finditer(log)
    }
    tasks = {}
    for row in report["rows"]:
        key = (row["assignment"], row["student"])
        seen = events.timings(root / ".grading", *key, phase="cluster").get("task")
        line = progress.get(key, {})
        if seen is None and not line:
            continue
        tasks[key] = {
            "seconds": float(seen if seen is not None else line["seconds"]),
            "worker": line.get("worker", ""),
        }
    return tasks


# -- 1. the reference submission, graded --------------------------------------
def autograde_breakdown(bare: list[dict], graded: dict) -> dict:
    rows = {r["assignment"]: r for r in graded["report"]["rows"]}
    tasks = {a: t["seconds"] for (a, _), t in graded["tasks"].items()}
    per_nb = []
    for b in bare:
        t = rows[b["assignment"]].get("timings") or {}
        per_nb.append(
            {
                "assignment": b["assignment"],
                "bare": b["total"],
                "task": tasks.get(b["assignment"], 0.0),
                "autograde_notebook": t.get("notebook", 0.0),
                "kernel_start": t.get("kernel_start", 0.0),
                "cells": t.get("cells", 0.0),
                "checks": t.get("checks", 0.0),
                "kernel_stop": t.get("kernel_stop", 0.0),
            }
        )
    steps = graded["report"]["steps"]
    bare_total = sum(b["total"] for b in bare)
    notebooks = sum(r["autograde_notebook"] for r in per_nb)
    task_total = sum(r["task"] for r in per_nb)
    return {
        "bare_seconds": bare_total,
        "autograde_step_seconds": steps["autograde"],
        "grade_all_seconds": steps["total"],
        "notebooks_seconds": notebooks,
        "tasks_seconds": task_total,
        "nbgrader_in_task_seconds": task_total - notebooks,
        "dask_seconds": steps["autograde"] - task_total,
        "ratio_autograde": steps["autograde"] / bare_total,
        "ratio_grade_all": steps["total"] / bare_total,
        "steps": steps,
        "cluster": graded["report"].get("cluster"),
        "per_notebook": per_nb,
    }


# -- 2. throughput --------------------------------------------------------------
def parallel(assignments, copies: int, work: Path) -> dict:
    students = {
        f"s{i + 1}": ("reference" if i % 2 == 0 else "blank") for i in range(copies)
    }
    runs, tasks = {}, {}
    for workers in (1, 2):
        root = work / f"parallel-{workers}"
        n = make_course(root, assignments, students)
        print(f"parallel: {n} submissions, {workers} worker(s) ...", flush=True)
        graded = grade(root, workers)
        steps = graded["report"]["steps"]
        tasks[workers] = [t["seconds"] for t in graded["tasks"].values()]
        runs[workers] = {
            "submissions": n,
            "autograde_seconds": steps["autograde"],
            "grade_all_seconds": steps["total"],
            "per_minute_autograde": 60 * n / steps["autograde"],
            "per_minute_grade_all": 60 * n / steps["total"],
            "mean_task_seconds": sum(tasks[workers]) / max(1, len(tasks[workers])),
            "client_steps_seconds": client_seconds(steps),
            "grades": sorted(graded["grades"]),
        }
    one, two = runs[1], runs[2]
    expected = sorted((a, s) for a in assignments for s in students)
    same = one["grades"] == two["grades"]
    complete = all(
        sorted((a, s) for a, s, _ in r["grades"]) == expected for r in (one, two)
    )
    return {
        "runs": {
            str(k): {kk: vv for kk, vv in v.items() if kk != "grades"}
            for k, v in runs.items()
        },
        "task_seconds": {str(k): v for k, v in tasks.items()},
        "speedup_autograde": one["autograde_seconds"] / two["autograde_seconds"],
        "speedup_grade_all": one["grade_all_seconds"] / two["grade_all_seconds"],
        "same_scores": same,
        "every_submission_once": complete,
    }


def client_seconds(steps: dict) -> float:
    """The steps the client runs on its own machine, however many workers."""
    return sum(v for k, v in steps.items() if k not in ("autograde", "total"))


# -- 3. straggler ---------------------------------------------------------------
def static_split(tasks: dict, workers: int) -> dict:
    """The old static split, from measured task seconds: the submissions
    sorted by (assignment, student), dealt round-robin into ``workers`` parts,
    each part graded one after the other."""
    parts = [0.0] * workers
    for i, key in enumerate(sorted(tasks)):
        parts[i % workers] += tasks[key]
    return {"parts_seconds": parts, "makespan": max(parts)}


def straggler(assignment: str, work: Path, count: int, sleep: int) -> dict:
    workers, slow = STRAGGLER["workers"], "s01"
    students = {
        f"s{i + 1:02d}": ("reference" if i % 2 == 0 else "blank") for i in range(count)
    }
    students[slow] = "sleeper"
    root = work / "straggler"
    n = make_course(root, [assignment], students, sleep=sleep)
    print(
        f"straggler: {n} submissions of {assignment}, {slow} sleeps {sleep} s, "
        f"{workers} workers ...",
        flush=True,
    )
    graded = grade(
        root, workers, "--cell-timeout", str(STRAGGLER["cell_timeout"]), assignment
    )
    steps = graded["report"]["steps"]
    tasks = {k: t["seconds"] for k, t in graded["tasks"].items()}
    scores = {s: score for _, s, score in graded["grades"]}
    reference = {scores[s] for s, k in students.items() if k == "reference"}
    total = sum(tasks.values())
    return {
        "assignment": assignment,
        "submissions": n,
        "workers": workers,
        "sleep_seconds": sleep,
        "slow_student": slow,
        "dynamic_makespan": steps["autograde"],
        "grade_all_seconds": steps["total"],
        "client_steps_seconds": client_seconds(steps),
        "static_split": static_split(tasks, workers),
        "ideal_makespan": max(max(tasks.values()), total / workers),
        "tasks_seconds": total,
        "slow_task_seconds": tasks.get((assignment, slow)),
        "per_submission": [
            {
                "student": s,
                "kind": students[s],
                "seconds": tasks[a, s],
                "worker": graded["tasks"][a, s]["worker"],
                "score": scores.get(s),
            }
            for a, s in sorted(tasks)
        ],
        "every_submission_once": sorted(tasks)
        == sorted((assignment, s) for s in students)
        and sorted(scores) == sorted(students),
        "sleeper_scored_as_reference": len(reference) == 1
        and scores.get(slow) in reference,
    }


# -- 4. scheduler overhead ------------------------------------------------------
def noop(x):
    return x


def scheduler_overhead(tasks: int) -> dict:
    """Seconds per trivial task on a local cluster of 2 single-threaded
    worker processes (after a warm-up)."""
    from distributed import Client, LocalCluster, wait

    print(f"overhead: {tasks} no-op tasks on 2 Dask workers ...", flush=True)
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",  # any free port: never 8787's
            # CRITICAL: a worker's heartbeat may race the shutdown (an ERROR)
            silence_logs=logging.CRITICAL,
        ) as local,
        Client(local) as client,
    ):
        wait(client.map(noop, range(50), pure=False))  # warm-up
        start = time.perf_counter()
        futures = client.map(noop, range(tasks), pure=False)
        wait(futures)
        seconds = time.perf_counter() - start
        assert sum(client.gather(futures)) == tasks * (tasks - 1) // 2
    return {
        "tasks": tasks,
        "workers": 2,
        "seconds": seconds,
        "ms_per_task": 1000 * seconds / tasks,
    }


# -- 5. estimate ----------------------------------------------------------------
def estimate(report: dict) -> dict | None:
    """10,000 notebooks on 64 workers, from the task seconds measured here."""
    par, strag, ag = (report.get(k) for k in ("parallel", "straggler", "autograde"))
    if par:
        seconds, source = par["task_seconds"]["1"], "throughput run, 1 worker"
    elif strag:
        seconds = [
            r["seconds"] for r in strag["per_submission"] if r["kind"] != "sleeper"
        ]
        source = "straggler run, without the sleeper"
    elif ag:
        seconds = [r["task"] for r in ag["per_notebook"]]
        source = "reference submission"
    else:
        return None
    if not seconds:
        return None
    mean = sum(seconds) / len(seconds)
    n, w = ESTIMATE["notebooks"], ESTIMATE["workers"]
    overhead = (report.get("overhead") or {}).get("ms_per_task", 0.0) / 1000
    grading = math.ceil(n / w) * mean
    out = {
        **ESTIMATE,
        "mean_task_seconds": mean,
        "task_source": source,
        "overhead_seconds_per_task": overhead,
        "scheduler_seconds": n * overhead,
        "grading_seconds": grading,
        # an upper bound: the scheduler's work does not overlap the grading
        "wall_seconds": grading + n * overhead,
    }
    out.update(client_steps(report, n))
    return out


def client_steps(report: dict, n: int) -> dict:
    """The client's own steps (generate, stage, feedback, export...) for ``n``
    notebooks: a line through the two runs of most and fewest submissions
    (fixed start + seconds per notebook), else per notebook of one run."""
    runs = [
        (r["submissions"], r["client_steps_seconds"])
        for r in (report.get("parallel") or {}).get("runs", {}).values()
    ]
    if report.get("straggler"):
        s = report["straggler"]
        runs.append((s["submissions"], s["client_steps_seconds"]))
    if not runs:
        return {}
    (n0, c0), (n1, c1) = min(runs), max(runs)
    if n1 > n0 and c1 > c0:
        slope = (c1 - c0) / (n1 - n0)
        fixed, how = c0 - slope * n0, "fit"
    else:
        slope, fixed, how = c1 / n1, 0.0, "per notebook of one run (upper bound)"
    return {
        "client_seconds_per_notebook": slope,
        "client_fixed_seconds": fixed,
        "client_fit": how,
        "client_seconds": max(0.0, fixed) + n * slope,
    }


# -- report -----------------------------------------------------------------
def targets(report: dict) -> list:
    """The issue's targets (and figures shown beside them) as measure.Target."""
    ag, par, out = report.get("autograde"), report.get("parallel"), []
    strag, ov = report.get("straggler"), report.get("overhead")
    if ag:
        out += [
            measure.Target(
                "whole grade_all / bare execution",
                ag["ratio_grade_all"],
                TARGETS["grade_all / bare"],
                unit="x",
                note=f"{ag['grade_all_seconds']:.1f} s / {ag['bare_seconds']:.1f} s",
            ),
            measure.Target(
                "autograde step / bare execution",
                ag["ratio_autograde"],
                None,
                unit="x",
                note=f"{ag['autograde_step_seconds']:.1f} s",
            ),
        ]
    if par:
        out += [
            measure.Target(
                "whole grade_all throughput, 2 workers / 1",
                par["speedup_grade_all"],
                TARGETS["2 workers / 1 worker"],
                unit="x",
                kind="min",
            ),
            measure.Target(
                "autograde throughput, 2 workers / 1",
                par["speedup_autograde"],
                None,
                unit="x",
            ),
            measure.Target(
                "every submission graded once, same scores",
                float(par["every_submission_once"] and par["same_scores"]),
                1.0,
                kind="min",
                fmt=lambda v: "yes" if v else "NO",
            ),
        ]
    if strag:
        out += [
            measure.Target(
                "straggler makespan, Dask queue",
                strag["dynamic_makespan"],
                None,
                unit="s",
                fmt=".1f",
                note=f"{strag['submissions']} submissions, one sleeps "
                f"{strag['sleep_seconds']} s, {strag['workers']} workers",
            ),
            measure.Target(
                "straggler makespan, old static split (computed)",
                strag["static_split"]["makespan"],
                None,
                unit="s",
                fmt=".1f",
                note="from the measured task seconds",
            ),
            measure.Target(
                "straggler makespan, ideal",
                strag["ideal_makespan"],
                None,
                unit="s",
                fmt=".1f",
                note="max(slowest task, sum / workers)",
            ),
            measure.Target(
                "straggler: every submission once, sleeper scored as reference",
                float(
                    strag["every_submission_once"]
                    and strag["sleeper_scored_as_reference"]
                ),
                1.0,
                kind="min",
                fmt=lambda v: "yes" if v else "NO",
            ),
        ]
    if ov:
        out.append(
            measure.Target(
                "Dask scheduler overhead per task",
                ov["ms_per_task"],
                None,
                unit="ms",
                fmt=".3f",
                note=f"{ov['tasks']} no-op tasks, 2 workers",
            )
        )
    return out


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def estimate_text(est: dict) -> list[str]:
    n, w, mean = est["notebooks"], est["workers"], est["mean_task_seconds"]
    lines = [
        f"Estimate: {n:,} notebooks on a {w}-core Slurm allocation ({w} "
        f"single-threaded Dask workers): about "
        f"**{duration(est['wall_seconds'])}** of autograding -- "
        f"ceil({n:,} / {w}) x {mean:.1f} s per task ({est['task_source']}) "
        f"= {duration(est['grading_seconds'])}, plus the scheduler's "
        f"{est['overhead_seconds_per_task'] * 1000:.2f} ms per task "
        f"({duration(est['scheduler_seconds'])} in all, counted as if it "
        f"did not overlap the grading).",
    ]
    if "client_seconds" in est:
        how = (
            f"{est['client_fixed_seconds']:.1f} s + "
            f"{est['client_seconds_per_notebook']:.2f} s per notebook, a line "
            f"through the runs measured here"
            if est["client_fit"] == "fit"
            else f"{est['client_seconds_per_notebook']:.2f} s per notebook of "
            f"one run, an upper bound: nbgrader's fixed start per step included"
        )
        lines[0] += (
            f" Before and after it, the client runs its own steps (references "
            f"check, generate, stage, feedback, leak scan, export) on one "
            f"machine: {how}, about {duration(est['client_seconds'])} for "
            f"{n:,} notebooks."
        )
    lines += [
        "",
        "Assumptions: throughput scales linearly with workers (one notebook per "
        "single-threaded worker, each node as fast as this machine: the task "
        "time per notebook is the one measured here, kernel start with "
        "TensorFlow and PyTorch included); the scheduler handles one task "
        "at a time at the rate measured here; the gradebook is a shared "
        "PostgreSQL server (NBGRADER_DB_URL) that keeps up with the workers' "
        "writes (SQLite cannot serve workers on several nodes); the staged "
        "files travel in the tasks (no shared file system needed); no "
        "straggler (a slow notebook holds up one worker, not the batch).",
        "",
    ]
    return lines


def markdown(report: dict) -> str:
    machine = report["machine"]
    threads = report.get("omp_num_threads") or "not set (all cores)"
    lines = [
        f"# Grading benchmark ({report['generated']})",
        "",
        f"{machine['cpu_count']} cores, load before "
        f"{machine['load_average_1_5_15min'][0]:.1f}, after "
        f"{report['load_after']:.1f}; OMP_NUM_THREADS: {threads}",
        "",
        measure.targets_table(targets(report)),
    ]
    ag, par, strag = (report.get(k) for k in ("autograde", "parallel", "straggler"))
    if ag:
        lines += [
            "Autograde per notebook (seconds):",
            "",
            measure.markdown_table(
                [
                    "assignment",
                    "bare",
                    "Dask task",
                    "notebook",
                    "kernel start",
                    "cells",
                    "checks",
                ],
                [
                    [
                        r["assignment"],
                        f"{r['bare']:.1f}",
                        f"{r['task']:.1f}",
                        f"{r['autograde_notebook']:.1f}",
                        f"{r['kernel_start']:.1f}",
                        f"{r['cells']:.1f}",
                        f"{r['checks']:.2f}",
                    ]
                    for r in ag["per_notebook"]
                ],
            ),
            f"Around the notebooks: nbgrader inside the tasks "
            f"{ag['nbgrader_in_task_seconds']:.1f} s, Dask (cluster start, worker "
            f"checks, transfers) {ag['dask_seconds']:.1f} s. grade_all steps: "
            + ", ".join(f"{k} {v:g} s" for k, v in ag["steps"].items()),
            "",
            "Bare execution per notebook (seconds):",
            "",
            measure.markdown_table(
                [
                    "assignment",
                    "kernel start",
                    "first cell (imports)",
                    "all cells",
                    "stop",
                    "total",
                ],
                [
                    [
                        b["assignment"],
                        f"{b['kernel_start']:.1f}",
                        f"{b['first_cell']:.1f}",
                        f"{b['cells']:.1f}",
                        f"{b['kernel_stop']:.2f}",
                        f"{b['total']:.1f}",
                    ]
                    for b in report["bare"]
                ],
            ),
        ]
    if par:
        lines += [
            "Throughput:",
            "",
            measure.markdown_table(
                [
                    "workers",
                    "submissions",
                    "autograde s",
                    "per minute",
                    "grade_all s",
                    "per minute",
                    "mean task s",
                ],
                [
                    [
                        k,
                        r["submissions"],
                        f"{r['autograde_seconds']:.1f}",
                        f"{r['per_minute_autograde']:.1f}",
                        f"{r['grade_all_seconds']:.1f}",
                        f"{r['per_minute_grade_all']:.1f}",
                        f"{r['mean_task_seconds']:.1f}",
                    ]
                    for k, r in par["runs"].items()
                ],
            ),
        ]
    if strag:
        parts = " + ".join(f"{p:.0f} s" for p in strag["static_split"]["parts_seconds"])
        lines += [
            f"Straggler ({strag['assignment']}, {strag['workers']} workers; "
            f"{strag['slow_student']} sleeps {strag['sleep_seconds']} s): the "
            f"Dask queue's makespan {strag['dynamic_makespan']:.1f} s; the old "
            f"static split (it no longer exists: computed from the measured task "
            f"seconds, round-robin over the submissions sorted by (assignment, "
            f"student), each part in turn; parts {parts}) "
            f"{strag['static_split']['makespan']:.1f} s; ideal "
            f"{strag['ideal_makespan']:.1f} s. Task seconds:",
            "",
            measure.markdown_table(
                ["student", "submission", "task s", "worker", "score"],
                [
                    [
                        r["student"],
                        r["kind"],
                        f"{r['seconds']:.1f}",
                        r["worker"],
                        f"{r['score']:g}" if r["score"] is not None else "-",
                    ]
                    for r in strag["per_submission"]
                ],
            ),
        ]
    if report.get("estimate"):
        lines += estimate_text(report["estimate"])
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "_build" / "bench" / "grading_speed.json"
    )
    parser.add_argument("--assignments", help="comma-separated ids (default: all)")
    parser.add_argument(
        "--copies",
        type=int,
        default=2,
        help="students per assignment in the throughput runs",
    )
    parser.add_argument(
        "--skip-bare", action="store_true", help="skip part 1 (bare vs grading)"
    )
    parser.add_argument("--skip-parallel", action="store_true", help="skip part 2")
    parser.add_argument("--skip-straggler", action="store_true", help="skip part 3")
    parser.add_argument("--skip-overhead", action="store_true", help="skip part 4")
    parser.add_argument(
        "--only-parallel",
        action="store_true",
        help="only the 1- vs 2-worker comparison",
    )
    parser.add_argument("--straggler-assignment", default="addressing")
    parser.add_argument(
        "--straggler-submissions", type=int, default=STRAGGLER["submissions"]
    )
    parser.add_argument("--straggler-sleep", type=int, default=STRAGGLER["sleep"])
    parser.add_argument("--overhead-tasks", type=int, default=2000)
    parser.add_argument("--keep", type=Path, help="keep the course copies here")
    args = parser.parse_args(argv)
    if args.only_parallel:
        args.skip_bare = args.skip_straggler = args.skip_overhead = True
        args.skip_parallel = False
    if args.straggler_sleep >= STRAGGLER["cell_timeout"]:
        parser.error(f"--straggler-sleep must be under {STRAGGLER['cell_timeout']} s")
    os.environ.update(QUIET)
    # the bare runs get the threads grade_all gives the student kernels (one,
    # unless set): the comparison is of grading's overhead, not of threads
    os.environ.update(kernel_env())
    assignments = args.assignments.split(",") if args.assignments else list(ASSIGNMENTS)
    work = args.keep or Path(tempfile.mkdtemp(prefix="attn-bench-grading-"))
    work.mkdir(parents=True, exist_ok=True)
    report = {
        "generated": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": measure.machine_info(
            ("torch", "tensorflow", "nbgrader", "jupyter-client", "distributed")
        ),
        "assignments": assignments,
        "targets": TARGETS,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    start = time.perf_counter()
    try:
        if not args.skip_bare:
            report["bare"] = bare_execution(assignments, work)
            root = work / "reference"
            make_course(root, assignments, {"reference": "reference"})
            print("autograde: the reference submission ...", flush=True)
            report["autograde"] = autograde_breakdown(report["bare"], grade(root, 1))
        if not args.skip_parallel:
            report["parallel"] = parallel(assignments, args.copies, work)
        if not args.skip_straggler:
            report["straggler"] = straggler(
                args.straggler_assignment,
                work,
                args.straggler_submissions,
                args.straggler_sleep,
            )
        if not args.skip_overhead:
            report["overhead"] = scheduler_overhead(args.overhead_tasks)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    report["estimate"] = estimate(report)
    report["seconds"] = round(time.perf_counter() - start, 1)
    report["load_after"] = os.getloadavg()[0]
    report["target_results"] = [t.as_dict() for t in targets(report)]
    table = markdown(report)
    measure.write_report(args.out, report, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
