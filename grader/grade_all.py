"""Grade every submission: sandboxed autograde, feedback, grades, report.

    python -m grader grade [--force] [--no-sandbox] [--workers N]
        [--scheduler tls://HOST:8786] [--cell-timeout S] [--notebook-timeout S]
        [--memory GIB] [--total-memory GIB] [--students A,B] [--report PATH]
        [ASSIGNMENT ...]

Put submissions in ``submitted/<student>/<assignment>/<assignment>.ipynb`` (or
collect them from the exchange with ``python -m grader collect``, which plain
``nbgrader collect`` also runs; ``nbgrader zip_collect`` for uploads), then run
this from anywhere. Steps (with assignment ids given, "*" is replaced by each):

0. refuse to start while another run grades this course folder (a lock in
   the grading state) or, with a PostgreSQL gradebook, this course on any
   machine (``grader.locks.hold_gradebook_run``); check that a bubblewrap
   sandbox can be started
   (otherwise stop, unless ``--no-sandbox``: then every kernel runs
   unsandboxed -- UNSAFE for untrusted code -- and every submission is
   flagged ``unsandboxed``);
1. check that the hidden reference data is up to date
   (``grader.build_references --check``);
2. ``nbgrader generate_assignment "*" --force`` -- records the current hidden
   tests in gradebook.db (autograde restores them from there) and refreshes
   the release; this step, and creating the students' rows, hold a lock on the
   gradebook (``grader.locks``), so graders sharing one
   PostgreSQL gradebook (``NBGRADER_DB_URL``) can run at the same time on
   different students;
3. stage the submissions (``grader.staging``): unreadable,
   missing or foreign notebooks are set aside, the rest rebuilt on the release
   in ``.grading/staged/`` (``submitted/`` is never changed);
4. autograde on Dask (``grader.cluster``): one task per staged submission,
   on an embedded local cluster of ``--workers`` single-threaded workers
   (default: one per core) or on the workers of ``--scheduler`` (or
   ``GRADER_SCHEDULER``); each runs nbgrader's Autograde in-process, the
   kernel in the sandbox, the hidden tests judged outside it; a lost worker's
   task runs again elsewhere (``--force`` regrades submissions graded before:
   without it, a submission with an ``autograded/`` folder is kept);
5. gives every submission that could not be graded a gradebook row with 0
   points (nbgrader's gradebook API, ``auto_score``) and the flag
   ``grader-error`` when the grader, not the student, failed: regrade it;
6. the feedback page of each graded submission (nbgrader's GenerateFeedback,
   run by the worker after the autograde; ``nbgrader generate_feedback`` here
   for any graded submission without one) -- then checks that the feedback holds
   no hidden data, hidden-test text or reference numbers (``grader.leaks``;
   what a student wrote themselves does not count): a page that does is
   moved to ``<state>/quarantine/`` (never released) and its submission
   flagged ``leak``; the others stay in ``feedback/``;
7. ``nbgrader export --to grades.csv`` -- one row per student and assignment;
8. prints a table -- score per part, flags such as timeout / crashed /
   tampered / missing -- and writes it to ``grading-report.json`` and
   ``grading-report.md`` (``--report``), with the seconds each step took and,
   per submission, the kernel's start, cell and check times.

Exit status: 0 when everyone was graded and written up (feedback flagged
``leak`` was withheld: the rest of ``feedback/`` may be released); 1 when the
release or ``feedback/`` as a whole leaks (grades.csv and the report are still
written; release nothing); 2 when nothing was graded (no sandbox, another run).
Only staged copies are autograded: each worker signs the copy it was sent
into a manifest of its own (``grader.entry``).
"""

import argparse
import contextlib
import html
import os
import shutil
import sys
import time
from pathlib import Path

from grader import build_references as references
from grader import cluster, dispatch, events, leaks, locks, report, sandbox, staging
from grader.nbgrader_cli import ROOT, assignments_in, nbgrader

BANNER = "!" * 78


def submitted(root: Path, assignment: str) -> list[str]:
    return staging.students_with(root, "submitted", assignment)


def course_config(root: Path) -> dict:
    """Settings of the course's nbgrader_config.py that the report shows."""
    from traitlets.config.loader import PyFileConfigLoader

    cfg = {}
    try:
        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    except Exception:  # noqa: BLE001  (a missing config: nbgrader's defaults)
        pass

    def get(section, key, default):
        try:
            value = cfg[section][key]
            return (
                default
                if value is None or type(value).__name__ == "LazyConfigValue"
                else value
            )
        except KeyError:
            return default

    return {
        "db_url": get(
            "CourseDirectory", "db_url", f"sqlite:///{root / 'gradebook.db'}"
        ),
        "course_id": get("CourseDirectory", "course_id", ""),
        "state_dir": get("GuardedExecute", "state_dir", str(root / ".grading")),
        "cell_timeout": get("Execute", "timeout", 120),
        "notebook_timeout": get("GuardedExecute", "notebook_timeout", 900),
        "memory": get("SandboxedKernelManager", "memory_limit", sandbox.Limits.memory),
        "total_memory": get(
            "SandboxedKernelManager", "total_memory_limit", sandbox.Limits.total_memory
        ),
        "processes": get(
            "SandboxedKernelManager", "process_limit", sandbox.Limits.processes
        ),
    }


def feedback_note(root: Path, student: str, assignment: str, notes) -> None:
    """A feedback page for a submission that could not be graded."""
    folder = root / "feedback" / student / assignment
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes) or "<li>-</li>"
    try:  # lets nbgrader release_feedback return this page; never a link
        secret = staging.read_file(
            root / "submitted", (student, assignment, staging.SECRET)
        )
        (folder / staging.SECRET).write_bytes(secret)
    except OSError:
        pass
    (folder / f"{assignment}.html").write_text(
        f"<!DOCTYPE html><html><body><h1>{html.escape(assignment)}</h1>"
        f"<p>Your submission could not be graded (0 points):</p><ul>{items}</ul>"
        f"</body></html>\n"
    )


def withhold_leaks(root: Path, state: Path, finish: dict) -> list[str]:
    """Scan the release and the feedback; move every feedback folder that
    leaks to ``<state>/quarantine/`` (flag ``leak`` on this run's submissions);
    return the problems no single submission's feedback explains (release,
    feedback/ itself): those fail the run."""
    problems = [f"release: {p}" for p in leaks.scan_release(root)]
    for key, found in sorted(leaks.feedback_leaks(root).items(), key=str):
        if key is None:
            problems += found
            continue
        student, assignment = key
        moved = leaks.quarantine(root, state / "quarantine", student, assignment)
        where = (
            moved.relative_to(root) if moved and moved.is_relative_to(root) else moved
        )
        for p in found:
            print(f"LEAK ({student}/{assignment}): {p}", flush=True)
        ev = finish.get((assignment, student))
        if ev is not None:
            for p in found:
                ev.flag(
                    "leak",
                    f"feedback withheld (moved to {where}): {p.split(': ', 1)[-1]}",
                )
            ev.save()
        print(
            f"  -> feedback of {student}/{assignment} withheld: moved to {where}",
            flush=True,
        )
    return problems


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "assignments",
        nargs="*",
        help="assignment ids (default: every one with submissions)",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the course root")
    parser.add_argument(
        "--force",
        action="store_true",
        help="regrade and rewrite feedback that exists already",
    )
    parser.add_argument("--to", default="grades.csv", help="the grades file")
    parser.add_argument(
        "--report",
        default="grading-report",
        help="the report: <REPORT>.json and <REPORT>.md",
    )
    parser.add_argument(
        "--students", help="only these comma-separated student ids (default: all)"
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run student kernels WITHOUT bubblewrap (UNSAFE: only "
        "for trusted submissions)",
    )
    parser.add_argument("--cell-timeout", type=int, help="seconds per cell")
    parser.add_argument("--notebook-timeout", type=int, help="seconds per notebook")
    parser.add_argument("--memory", type=float, help="GiB of address space per process")
    parser.add_argument(
        "--total-memory",
        type=float,
        help="GiB of memory for all of a kernel's processes together "
        "(default 4; 0: no such limit)",
    )
    parser.add_argument("--processes", type=int, help="processes + threads per kernel")
    parser.add_argument(
        "--workers",
        type=int,
        default=dispatch.default_workers(),
        help="workers of the embedded Dask cluster (default: one per core; "
        "ignored with --scheduler)",
    )
    parser.add_argument(
        "--scheduler",
        default=os.environ.get(cluster.SCHEDULER_ENV) or None,
        help="grade on the Dask cluster at this address (tls://HOST:8786; "
        "default $GRADER_SCHEDULER, else an embedded local cluster)",
    )
    parser.add_argument(
        "--dashboard",
        action="store_true",
        help="serve the embedded cluster's Dask dashboard and status pages (plain "
        "HTTP on 127.0.0.1: anyone on this machine can read them; needs bokeh)",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.total_memory is not None and args.total_memory < 0:
        parser.error(f"--total-memory must be 0 or more, got {args.total_memory}")
    return args


class Steps(dict):
    """Seconds per step of the run (summed when a step repeats)."""

    @contextlib.contextmanager
    def __call__(self, name):
        began = time.monotonic()
        try:
            yield
        finally:
            self[name] = round(self.get(name, 0) + time.monotonic() - began, 2)


def limit_overrides(args, settings: dict) -> list[str]:
    """nbgrader options for the limits given on the command line (and the
    settings the report prints, updated to match)."""
    overrides = []
    if args.cell_timeout:
        overrides.append(f"--Execute.timeout={args.cell_timeout}")
        settings["cell_timeout"] = args.cell_timeout
    if args.notebook_timeout:
        overrides.append(f"--GuardedExecute.notebook_timeout={args.notebook_timeout}")
        settings["notebook_timeout"] = args.notebook_timeout
    if args.memory:
        settings["memory"] = int(args.memory * sandbox.GiB)
        overrides.append(f"--SandboxedKernelManager.memory_limit={settings['memory']}")
    if args.total_memory is not None:
        settings["total_memory"] = int(args.total_memory * sandbox.GiB)
        overrides.append(
            f"--SandboxedKernelManager.total_memory_limit={settings['total_memory']}"
        )
    if args.processes:
        settings["processes"] = args.processes
        overrides.append(f"--SandboxedKernelManager.process_limit={args.processes}")
    if args.no_sandbox:
        overrides.append("--SandboxedKernelManager.sandbox=False")
    return overrides


def sandbox_ready(args, settings: dict) -> bool:
    """Say how student kernels will run; False if they cannot be sandboxed."""
    if args.no_sandbox:
        print(
            f"{BANNER}\nWARNING: --no-sandbox: student code runs as "
            f"{os.environ.get('USER', 'this user')}, with network access, and can "
            f"read the reference data and\nwrite the gradebook. Every submission is "
            f"flagged 'unsandboxed'. Use only for trusted submissions.\n{BANNER}",
            flush=True,
        )
        return True
    problem = sandbox.check_available(sandbox.Limits(memory=settings["memory"]))
    if problem:
        print(
            f"{BANNER}\nERROR: cannot sandbox student kernels: {problem}\n"
            f"Nothing was graded.\n{BANNER}",
            flush=True,
        )
        return False
    print(
        "sandbox: bubblewrap OK (no network, read-only system, no course "
        "files, limits per kernel)",
        flush=True,
    )
    return True


def autograde(args, root, state, gradable, settings, options):
    """Grade the staged submissions on Dask (``grader.dispatch``); record how
    each task went; returns (outcomes, summary)."""
    if not args.force:  # nbgrader's rule: an autograded folder is kept
        kept = [
            s
            for s in gradable
            if (root / "autograded" / s.student / s.assignment).is_dir()
        ]
        for s in kept:
            print(f"{s.student}/{s.assignment}: graded before, kept (--force regrades)")
        gradable = [s for s in gradable if s not in kept]
    if not gradable:
        return {}, dispatch.Summary()
    outcomes, summary = dispatch.run(
        root,
        state,
        gradable,
        settings,
        options,
        sandboxed=not args.no_sandbox,
        workers=args.workers,
        scheduler=args.scheduler,
        dashboard=args.dashboard,
    )
    dispatch.record(state, outcomes, summary)
    return outcomes, summary


def finish_submissions(root, state, staged, db, course, outcomes) -> dict:
    """A gradebook row for every staged submission: what nbgrader could not
    grade (or never saw) gets zeros and a feedback page that says why."""
    finish = {}
    for s in staged:
        ev = finish[s.assignment, s.student] = events.Events(
            state, s.assignment, s.student, "finish"
        )
        outcome = outcomes.get((s.assignment, s.student))
        if outcome is not None and outcome.error:
            shutil.rmtree(
                root / "autograded" / s.student / s.assignment, ignore_errors=True
            )
            report.zero(db, course, s.assignment, s.student)
            feedback_note(
                root, s.student, s.assignment, [f"[grader-error] {outcome.error}"]
            )
        elif s.notebook is not None and not report.graded(
            db, course, s.assignment, s.student
        ):
            ev.flag(
                "grader-error",
                "nbgrader could not grade this submission "
                "(see the log above); scored 0",
            )
        if s.notebook is None or ev.flags:
            report.zero(db, course, s.assignment, s.student)
            shutil.rmtree(
                root / "autograded" / s.student / s.assignment, ignore_errors=True
            )
            feedback_note(root, s.student, s.assignment, s.events.notes + ev.notes)
        ev.save()
    return finish


def write_report(args, root, state, settings, staged, steps, summary) -> dict:
    """The report files and the table at the end of the run."""
    limits = {
        "cell": f"{settings['cell_timeout']} s",
        "notebook": f"{settings['notebook_timeout']} s",
        "memory": f"{settings['memory'] / sandbox.GiB:g} GiB",
        "total memory": f"{settings['total_memory'] / sandbox.GiB:g} GiB",
        "processes": settings["processes"],
    }
    result = report.build(
        settings["db_url"],
        settings["course_id"],
        state,
        [(s.assignment, s.student) for s in staged],
        sandboxed=not args.no_sandbox,
        limits=limits,
    )
    result["steps"] = dict(steps)
    result["cluster"] = {
        "scheduler": summary.scheduler or "(none: nothing to grade)",
        "embedded": not args.scheduler,
        "workers": summary.workers,
        "refused": summary.refused,
        "seconds": summary.seconds,
        "peak_rss_mib": summary.peak_rss_mib,
    }
    result["workers"] = len(summary.workers) - len(summary.refused)
    json_path, md_path = report.write(result, root / args.report)
    print()
    print(report.table(result))
    print(f"\nreport written to {json_path} and {md_path}")
    withheld = [r for r in result["rows"] if "leak" in r["flags"]]
    if withheld:
        print(
            f"feedback withheld (flag 'leak', see the report): "
            f"{', '.join(r['student'] + '/' + r['assignment'] for r in withheld)}"
            f"; the rest of feedback/ may be released"
        )
    return result


def take_run_locks(settings: dict, state: Path):
    """This course folder's lock and, with a PostgreSQL gradebook, the lock of
    this course in it (``grader.locks``); None, said why, if either is held."""
    try:
        return (
            locks.hold_course_lock(state),
            locks.hold_gradebook_run(settings["db_url"], settings["course_id"]),
        )
    except locks.CourseBusy as exc:
        print(
            f"{BANNER}\nERROR: {exc}. Nothing was graded; run again when it has "
            f"finished.\n{BANNER}",
            flush=True,
        )
        return None


def missing_feedback(root: Path, gradable) -> None:
    """The workers made each graded submission's feedback page; make here the
    ones missing (a worker's GenerateFeedback failed, or an older run's)."""
    missing = [
        s
        for s in gradable
        if (root / "autograded" / s.student / s.assignment).is_dir()
        and not (root / "feedback" / s.student / s.assignment).is_dir()
    ]
    for assignment in sorted({s.assignment for s in missing}):
        nbgrader(root, "generate_feedback", assignment)


def stage(args, root, state, todo, db, course) -> list:
    """Stage the submissions (``grader.staging``); every student gets a
    gradebook row before any task writes one."""
    students = set(args.students.split(",")) if args.students else None
    staged = staging.stage(root, state, todo, students)
    for s in staged:
        if s.notebook is None:
            events.clear(state, s.assignment, s.student, ("execute", "verdicts"))
    with locks.gradebook_lock(db):
        locks.ensure_students(db, course, {s.student for s in staged})
    return staged


def main(argv=None) -> int:
    args = parse_args(argv)
    steps = Steps()
    root = args.root.resolve()
    os.environ["GRADER_GRADE_ALL"] = "1"  # inherited by nbgrader
    os.environ.update(locks.kernel_env())  # one thread per student kernel
    settings = course_config(root)
    state = Path(settings["state_dir"])
    held = take_run_locks(settings, state)  # noqa: F841  (held until the end)
    if held is None:
        return 2
    overrides = limit_overrides(args, settings)
    if not sandbox_ready(args, settings):
        return 2

    began = time.monotonic()
    present = args.assignments or assignments_in(root)
    with steps("check references"):
        if references.main(
            ["--check", "--no-crosscheck", "--root", str(root), *present]
        ):
            return 1
    todo = [a for a in present if submitted(root, a)]
    if not todo:
        print("no submissions found under submitted/<student>/<assignment>/")
        return 1
    for assignment in todo:
        print(f"== {assignment}: {', '.join(submitted(root, assignment))}")
    # one nbgrader process per step: "*" covers every assignment at once
    batch = ["*"] if not args.assignments else todo
    db, course = settings["db_url"], settings["course_id"]
    with steps("generate"), locks.gradebook_lock(db):
        for assignment in batch:
            nbgrader(root, "generate_assignment", assignment, "--force")

    with steps("stage"):
        staged = stage(args, root, state, todo, db, course)
    gradable = [s for s in staged if s.notebook is not None]
    with steps("autograde"):
        outcomes, summary = autograde(args, root, state, gradable, settings, overrides)
    finish = finish_submissions(root, state, staged, db, course, outcomes)

    with steps("feedback"):
        missing_feedback(root, gradable)
    with steps("leak scan"):
        problems = withhold_leaks(root, state, finish)
    for p in problems:
        print("LEAK:", p)
    with steps("export"):
        nbgrader(root, "export", "--to", args.to)
    print(f"grades written to {root / args.to}")
    steps["total"] = round(time.monotonic() - began, 2)
    write_report(args, root, state, settings, staged, steps, summary)
    if problems:
        print(
            f"{BANNER}\nLEAKS outside any one student's feedback (above): do NOT "
            f"release exercises/ or feedback/ until they are fixed.\n{BANNER}"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
