"""What sandboxed autograding costs, and how grading scales with workers.

    python bench/grading_speed.py [--out _build/bench/grading_speed.json]
        [--assignments a,b] [--copies 2] [--skip-parallel | --only-parallel]
        [--keep DIR]

Writes the JSON report and a markdown table beside it (same name, ``.md``).
Everything is measured in one run, on temporary copies of the course (the
repository is not touched):

1. **bare execution** -- every assignment's source notebook (the reference
   solution with its hidden tests) run by nbclient in a plain local kernel, one
   after the other, with the thread setting grade_all gives student kernels
   (one thread unless OMP_NUM_THREADS etc. are set): kernel start, first cell
   (it imports TensorFlow and PyTorch), the other cells, shutdown;
2. **autograde of the reference submission** -- one student who submitted the
   reference solution of every assignment, graded by
   ``python -m grader grade`` (one worker): the autograde
   step against (1) -- target at most 1.2x -- with its breakdown per notebook
   from the grading report (sandboxed kernel start, which preloads the
   frameworks, cells, the per-cell checks, kernel stop) and the nbgrader
   process's own share; and the whole command (generate, stage, autograde,
   feedback, export) for reference;
3. **parallel grading** -- ``--copies`` students per assignment (the
   reference solution and the blank release, alternating) graded with
   ``--workers 1`` and then ``--workers 2`` on two fresh course copies:
   submissions per minute of each, their ratio (target at least 1.7x), and a
   check that both runs graded every submission exactly once with the same
   scores.
"""

import argparse
import csv
import datetime
import json
import os
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

from grader import notebooks as nbs  # noqa: E402
from grader.assignments import ASSIGNMENTS  # noqa: E402
from grader.nbgrader_cli import path_with_this_python  # noqa: E402
from grader.parallel import kernel_env  # noqa: E402

QUIET = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONHASHSEED": "0",
}
TARGETS = {"autograde / bare": 1.2, "2 workers / 1 worker": 1.7}


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


# -- 2./3. grading ------------------------------------------------------------
def make_course(dest: Path, assignments, students: dict) -> int:
    """A course copy; ``students`` maps a student id to "reference" or "blank".
    Returns the number of submissions."""
    dest.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", dest)
    shutil.copytree(
        ROOT / "attncourse",
        dest / "attncourse",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    shutil.copytree(
        ROOT / "grader",
        dest / "grader",
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
        solved = nbs.submission(
            release, nbs.solution_cells(nbs.read(ROOT / "solutions" / a / f"{a}.ipynb"))
        )
        for student, kind in students.items():
            nb = solved if kind == "reference" else release
            nbs.write(nb, dest / "submitted" / student / a / f"{a}.ipynb")
            count += 1
    return count


def grade(root: Path, workers: int) -> dict:
    env = {**os.environ, **QUIET, "PYTHONPATH": str(root)}
    env.pop("GRADER_REFERENCE", None)
    env["PATH"] = path_with_this_python(env.get("PATH", ""))
    start = time.perf_counter()
    with open(root / "grade_all.log", "w") as log:
        code = subprocess.run(
            [sys.executable, "-m", "grader", "grade", "--workers", str(workers)],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    wall = time.perf_counter() - start
    if code:
        tail = (root / "grade_all.log").read_text()[-3000:]
        raise RuntimeError(f"grade_all failed in {root} (exit {code}):\n{tail}")
    report = json.loads((root / "grading-report.json").read_text())
    rows = list(csv.DictReader(open(root / "grades.csv")))
    return {
        "wall": wall,
        "report": report,
        "grades": [(r["assignment"], r["student_id"], float(r["score"])) for r in rows],
    }


def autograde_breakdown(bare: list[dict], graded: dict) -> dict:
    rows = {r["assignment"]: r for r in graded["report"]["rows"]}
    per_nb = []
    for b in bare:
        t = rows[b["assignment"]]["timings"]
        per_nb.append(
            {
                "assignment": b["assignment"],
                "bare": b["total"],
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
    return {
        "bare_seconds": bare_total,
        "autograde_step_seconds": steps["autograde"],
        "grade_all_seconds": steps["total"],
        "notebooks_seconds": notebooks,
        "nbgrader_process_seconds": steps["autograde"] - notebooks,
        "ratio_autograde": steps["autograde"] / bare_total,
        "ratio_grade_all": steps["total"] / bare_total,
        "steps": steps,
        "per_notebook": per_nb,
    }


def parallel(assignments, copies: int, work: Path) -> dict:
    students = {
        f"s{i + 1}": ("reference" if i % 2 == 0 else "blank") for i in range(copies)
    }
    runs = {}
    for workers in (1, 2):
        root = work / f"parallel-{workers}"
        n = make_course(root, assignments, students)
        print(f"parallel: {n} submissions, {workers} worker(s) ...", flush=True)
        graded = grade(root, workers)
        steps = graded["report"]["steps"]
        runs[workers] = {
            "submissions": n,
            "autograde_seconds": steps["autograde"],
            "grade_all_seconds": steps["total"],
            "per_minute_autograde": 60 * n / steps["autograde"],
            "per_minute_grade_all": 60 * n / steps["total"],
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
        "speedup_autograde": one["autograde_seconds"] / two["autograde_seconds"],
        "speedup_grade_all": one["grade_all_seconds"] / two["grade_all_seconds"],
        "same_scores": same,
        "every_submission_once": complete,
    }


# -- report -----------------------------------------------------------------
def targets(report: dict) -> list:
    """The issue's targets (and figures shown beside them) as measure.Target."""
    ag, par, out = report.get("autograde"), report.get("parallel"), []
    if ag:
        out += [
            measure.Target(
                "autograde step / bare execution",
                ag["ratio_autograde"],
                TARGETS["autograde / bare"],
                unit="x",
                note=f"{ag['autograde_step_seconds']:.1f} s "
                f"/ {ag['bare_seconds']:.1f} s",
            ),
            measure.Target(
                "whole grade_all / bare execution",
                ag["ratio_grade_all"],
                None,
                unit="x",
                note=f"{ag['grade_all_seconds']:.1f} s",
            ),
        ]
    if par:
        out += [
            measure.Target(
                "autograde throughput, 2 workers / 1",
                par["speedup_autograde"],
                TARGETS["2 workers / 1 worker"],
                unit="x",
                kind="min",
            ),
            measure.Target(
                "whole grade_all throughput, 2 workers / 1",
                par["speedup_grade_all"],
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
    return out


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
    ag, par = report.get("autograde"), report.get("parallel")
    if ag:
        lines += [
            "Autograde per notebook (seconds):",
            "",
            measure.markdown_table(
                [
                    "assignment",
                    "bare",
                    "graded",
                    "kernel start",
                    "cells",
                    "checks",
                    "kernel stop",
                ],
                [
                    [
                        r["assignment"],
                        f"{r['bare']:.1f}",
                        f"{r['autograde_notebook']:.1f}",
                        f"{r['kernel_start']:.1f}",
                        f"{r['cells']:.1f}",
                        f"{r['checks']:.2f}",
                        f"{r['kernel_stop']:.2f}",
                    ]
                    for r in ag["per_notebook"]
                ],
            ),
            f"nbgrader's own share of the autograde step: "
            f"{ag['nbgrader_process_seconds']:.1f} s. grade_all steps: "
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
            "Parallel grading:",
            "",
            measure.markdown_table(
                [
                    "workers",
                    "submissions",
                    "autograde s",
                    "per minute",
                    "grade_all s",
                    "per minute",
                ],
                [
                    [
                        k,
                        r["submissions"],
                        f"{r['autograde_seconds']:.1f}",
                        f"{r['per_minute_autograde']:.1f}",
                        f"{r['grade_all_seconds']:.1f}",
                        f"{r['per_minute_grade_all']:.1f}",
                    ]
                    for k, r in par["runs"].items()
                ],
            ),
        ]
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
        help="students per assignment in the parallel runs",
    )
    parser.add_argument("--skip-parallel", action="store_true")
    parser.add_argument(
        "--only-parallel",
        action="store_true",
        help="only the 1- vs 2-worker comparison",
    )
    parser.add_argument("--keep", type=Path, help="keep the course copies here")
    args = parser.parse_args(argv)
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
            ("torch", "tensorflow", "nbgrader", "jupyter-client")
        ),
        "assignments": assignments,
        "targets": TARGETS,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    start = time.perf_counter()
    try:
        if not args.only_parallel:
            report["bare"] = bare_execution(assignments, work)
            root = work / "reference"
            make_course(root, assignments, {"reference": "reference"})
            print("autograde: the reference submission ...", flush=True)
            report["autograde"] = autograde_breakdown(report["bare"], grade(root, 1))
        if not args.skip_parallel:
            report["parallel"] = parallel(assignments, args.copies, work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = round(time.perf_counter() - start, 1)
    report["load_after"] = os.getloadavg()[0]
    report["target_results"] = [t.as_dict() for t in targets(report)]
    table = markdown(report)
    measure.write_report(args.out, report, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
