"""How much a CPU hog graded beside them slows honest submissions.

    python bench/cpu_fairness.py [--out _build/bench/cpu_fairness.json]
        [--honest 6] [--hog-seconds 90] [--scenarios alone,pty-hog,...]

Writes the JSON report and a markdown table beside it (same name, ``.md``).
Each scenario grades a fresh copy of the course with ``--honest`` students who
submitted the reference solution of ``addressing`` and, but for ``alone``,
one hog, with ``python -m grader grade --workers 2`` (``alone``: one worker,
so each honest submission has the machine to itself). The hog is submitted
first, so one worker grades it while the other grades the honest students
one after the other beside it. The figure is each honest submission's
execute time (kernel start, cells, checks, kernel stop, from its grading
log) and the ratio of their mean to the mean alone:

* ``two-workers``: the honest students only, two at a time (the second
  worker's share of a small machine, no hog);
* ``pty-hog``: the observed attack, ``os.forkpty`` ``--hog-forks`` children
  spinning in sessions of their own for ``--hog-seconds`` s, with the
  default limits (cgroup CPU quota or the watchdog's governor, the process
  cap: the hog is killed and flagged ``runaway``);
* ``pty-hog-unlimited``: the same without a cgroup, CPU share or process
  cap (``use_cgroups = False``, ``cpu_cores = 0``, ``sandbox_processes = 0``):
  what the attack did before (a cgroup even without a quota already weighs the
  hog's hundred processes like one);
* ``spinners``: six setsid'd spinners, under the process cap, for
  ``--hog-seconds`` s: held to one core by the cgroup quota;
* ``spinners-watchdog``: the same with ``use_cgroups = False``: held by the
  watchdog's SIGSTOP/SIGCONT governor.

Which of the cgroup or the watchdog governs in the default scenarios depends on
the machine (root and a writable /sys/fs/cgroup: the cgroup); the report says.
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import grading_speed  # noqa: E402  (bench/ is not a package: the script's folder)
import measure  # noqa: E402

from grader import events, sandbox  # noqa: E402
from grader import notebooks as nbs  # noqa: E402

A = "addressing"
STEPS = ("kernel_start", "cells", "checks", "kernel_stop")


def pty_hog(forks: int, seconds: int) -> str:
    return f"""\
import os, time
for _ in range({forks}):
    pid, fd = os.forkpty()
    if pid == 0:
        end = time.time() + {seconds}
        while time.time() < end:
            pass
        os._exit(0)
time.sleep({seconds})
"""


def spinners(count: int, seconds: int) -> str:
    return f"""\
import os, time
children = []
for _ in range({count}):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        end = time.time() + {seconds}
        while time.time() < end:
            pass
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


SCENARIOS = {
    # name: (hog kind or None, nbgrader config lines, workers)
    "alone": (None, [], 1),
    "two-workers": (None, [], 2),
    "pty-hog": ("pty", [], 2),
    "pty-hog-unlimited": (
        "pty",
        [
            "c.SandboxedKernelManager.cpu_cores = 0",
            "c.SandboxedKernelManager.sandbox_processes = 0",
            "c.SandboxedKernelManager.use_cgroups = False",
        ],
        2,
    ),
    "spinners": ("spin", [], 2),
    "spinners-watchdog": ("spin", ["c.SandboxedKernelManager.use_cgroups = False"], 2),
}


def make_course(dest: Path, honest: int, hog: str | None, args, config) -> None:
    dest.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", dest)
    with open(dest / "nbgrader_config.py", "a") as f:
        f.write("".join(f"\n{line}" for line in config) + "\n")
    for package in ("attncourse", "grader"):
        shutil.copytree(
            ROOT / package,
            dest / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
    shutil.copytree(
        ROOT / "solutions" / A,
        dest / "solutions" / A,
        ignore=shutil.ignore_patterns("grader-errors.log"),
    )
    release = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
    solutions = nbs.solution_cells(nbs.read(ROOT / "solutions" / A / f"{A}.ipynb"))
    students = {f"b-honest-{i + 1}": solutions for i in range(honest)}
    if hog is not None:
        code = (
            pty_hog(args.hog_forks, args.hog_seconds)
            if hog == "pty"
            else spinners(6, args.hog_seconds)
        )
        first = next(iter(solutions))
        students = {"a-hog": dict(solutions, **{first: code + solutions[first]})}
        students.update({f"b-honest-{i + 1}": solutions for i in range(honest)})
    for student, cells in students.items():
        nb = nbs.submission(release, cells)
        nbs.write(nb, dest / "submitted" / student / A / f"{A}.ipynb")


def scenario(name: str, args, work: Path) -> dict:
    hog, config, workers = SCENARIOS[name]
    root = work / name
    make_course(root, args.honest, hog, args, config)
    cell_timeout = str(args.hog_seconds + 60)
    graded = grading_speed.grade(root, workers, "--cell-timeout", cell_timeout)
    rows = {r["student"]: r for r in graded["report"]["rows"]}
    students = {}
    for student, row in sorted(rows.items()):
        steps = events.timings(root / ".grading", A, student)
        students[student] = {
            "execute_seconds": round(sum(steps.get(s, 0.0) for s in STEPS), 2),
            "kernel_start_seconds": round(steps.get("kernel_start", 0.0), 2),
            "score": row.get("score"),
            "flags": row.get("flags", []),
        }
    log = (root / "grade_all.log").read_text()
    held = [line for line in log.splitlines() if "sandbox a-hog/" in line]
    honest = [s for s in students if s.startswith("b-honest")]
    return {
        "wall_seconds": round(graded["wall"], 1),
        "students": students,
        "honest_mean_seconds": round(
            statistics.mean(students[s]["execute_seconds"] for s in honest), 2
        ),
        "honest_max_kernel_start": max(
            students[s]["kernel_start_seconds"] for s in honest
        ),
        "hog_watchdog": [line.split(": ", 1)[-1] for line in held][-2:],
    }


def table(report: dict) -> str:
    alone = report["scenarios"].get("alone", {}).get("honest_mean_seconds")
    pairs = report["scenarios"].get("two-workers", {}).get("honest_mean_seconds")
    rows = []
    for name, data in report["scenarios"].items():
        mean = data["honest_mean_seconds"]
        hog = data["students"].get("a-hog", {})
        rows.append(
            [
                name,
                f"{mean:.1f}",
                f"{mean / alone:.2f}x" if alone else "",
                f"{mean / pairs:.2f}x" if pairs else "",
                f"{data['honest_max_kernel_start']:.1f}",
                " ".join(
                    sorted({f for s, d in data["students"].items() for f in d["flags"]})
                    if not hog
                    else hog["flags"]
                )
                or "-",
                f"{data['wall_seconds']:.0f}",
            ]
        )
    head = (
        f"# CPU fairness: honest submissions beside a CPU hog\n\n"
        f"{report['honest']} honest `{A}` submissions; the hog forks "
        f"{report['hog_forks']} children (pty) or 6 (spinners) for "
        f"{report['hog_seconds']} s. CPU limit here: {report['cpu_limit']}. "
        f"Machine: {report['machine']['cpu_count']} cores, load "
        f"{report['machine']['load_average_1_5_15min']} at the start.\n\n"
    )
    return head + measure.markdown_table(
        [
            "scenario",
            "honest execute (mean, s)",
            "vs alone",
            "vs two workers, no hog",
            "slowest honest kernel start (s)",
            "hog flags (alone: all flags)",
            "run (s)",
        ],
        rows,
        align="lrrrrll",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="_build/bench/cpu_fairness.json")
    parser.add_argument("--honest", type=int, default=6)
    parser.add_argument("--hog-seconds", type=int, default=90)
    parser.add_argument("--hog-forks", type=int, default=100)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--keep", help="keep the course copies in this folder")
    args = parser.parse_args()
    names = [n for n in args.scenarios.split(",") if n]
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    group = sandbox.Cgroup.create(0, 64)
    limit = (
        f"cgroup v{group.version} quota"
        if group is not None
        else "watchdog governor (no writable cgroup)"
    )
    if group is not None:
        group.remove()
    began = time.monotonic()
    report = {
        "machine": measure.machine_info(),
        "honest": args.honest,
        "hog_seconds": args.hog_seconds,
        "hog_forks": args.hog_forks,
        "cpu_limit": limit,
        "cpu_cores": sandbox.Limits.cpu_cores,
        "sandbox_processes": sandbox.Limits.sandbox_processes,
        "scenarios": {},
    }
    work = Path(args.keep or tempfile.mkdtemp(prefix="attn-fairness-"))
    try:
        for name in names:
            print(f"-- {name}", flush=True)
            report["scenarios"][name] = scenario(name, args, work)
            print(json.dumps(report["scenarios"][name], indent=1), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for base in ("alone", "two-workers"):
        mean = report["scenarios"].get(base, {}).get("honest_mean_seconds")
        report[f"ratios_vs_{base}"] = {
            name: round(data["honest_mean_seconds"] / mean, 2)
            for name, data in report["scenarios"].items()
            if mean and name != base
        }
    report["seconds"] = round(time.monotonic() - began)
    measure.write_report(Path(args.out), report, table(report))


if __name__ == "__main__":
    main()
