"""Autograde on several cores, and graders that share one gradebook.

``grade_all --workers N`` splits the staged submissions into N parts and runs
one ``nbgrader autograde`` process per part at the same time. Each part is a
folder of its own (``<state>/parts/<k>/<student>/<assignment>/``), so no two
processes ever grade the same submission; every process writes its results to
the same gradebook, its own rows only. Every student kernel runs with one thread
(OMP / MKL / TensorFlow variables, passed into the sandbox, unless the grader
sets them): the exercises' tensors are tiny, and a second thread made them
slower even alone (``make bench-grading``: the six reference notebooks ran in
30 s with one thread and 42 s with two, on two cores); more cores are used by
more workers.

Several graders -- workers of one ``grade_all``, or ``grade_all`` processes on
several machines sharing a PostgreSQL gradebook (``NBGRADER_DB_URL``) -- must not
run the steps that create shared rows at the same time: two
``generate_assignment`` runs, or two ``autograde`` runs creating the same
student, both INSERT the same key and one fails. ``gradebook_lock`` serialises
those steps: a PostgreSQL advisory lock (held by one connection for as long as
the step runs), or, for SQLite, an exclusive ``flock`` on a file beside the
database. ``ensure_students`` creates every student's row under that lock before
the workers start, so autograde only updates rows that exist.

Different graders must grade different submissions (split the students with
``--students``): two graders autograding the same submission at once would
both rewrite it, and the last one wins.
"""

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

LOCK_KEY = 0x6174746E  # "attn": the advisory-lock key every grader uses
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


def partition(items: list, workers: int) -> list[list]:
    """Split ``items`` into ``workers`` parts, round-robin in the given order.

    Sorted by assignment first, every part gets about as many submissions of
    each assignment as the others (their costs differ by assignment)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    parts = [items[k::workers] for k in range(workers)]
    return [p for p in parts if p]


KERNEL_THREADS = 1


def kernel_env(base=None) -> dict:
    """The environment graders pass on to the student kernels: one thread per
    kernel (a variable that is set already is kept)."""
    env = dict(os.environ if base is None else base)
    for var in THREAD_VARS:
        env.setdefault(var, str(KERNEL_THREADS))
    return env


def is_postgres(db_url: str) -> bool:
    return db_url.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres")


def sqlite_path(db_url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL (None for in-memory or other URLs)."""
    prefix = "sqlite:///"
    if not db_url.startswith(prefix):
        return None
    path = db_url[len(prefix) :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


@contextlib.contextmanager
def gradebook_lock(db_url: str, timeout: float = 1800):
    """Hold the graders' lock on this gradebook while the block runs."""
    if is_postgres(db_url):
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        engine = create_engine(db_url, future=True, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(text(f"SET lock_timeout = '{int(timeout * 1000)}ms'"))
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": LOCK_KEY})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
                    conn.commit()
        finally:
            engine.dispose()
        return
    path = sqlite_path(db_url)
    if path is None:  # another database: nothing we know how to lock
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with open(f"{path}.lock", "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another grader holds {path}.lock") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class CourseBusy(RuntimeError):
    """Another grading run holds this course's grading state."""


def hold_course_lock(state_dir):
    """Take the lock of one course's grading state (``<state>/grade_all.lock``)
    for as long as the returned file stays open -- the rest of the run. Two
    runs on one course folder would stage, grade and clear each other's
    submissions; the second one is refused (``CourseBusy``) instead of waiting
    behind a batch that may take an hour."""
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    handle = open(state / "grade_all.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise CourseBusy(
            f"another grading run ({holder}) is grading this course "
            f"(lock: {state / 'grade_all.lock'})"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}")
    handle.flush()
    return handle


def ensure_students(db_url: str, course_id: str, students) -> None:
    """Create the gradebook rows of ``students`` that do not exist yet."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        for student in sorted(set(students)):
            try:
                gb.find_student(student)
            except MissingEntry:
                gb.add_student(student)


def _pump(stream, prefix: str) -> None:
    for line in iter(stream.readline, ""):
        sys.stdout.write(f"{prefix}{line}")
        sys.stdout.flush()
    stream.close()


def run_workers(
    root: Path,
    state: Path,
    staged,
    batch: list[str],
    workers: int,
    nbgrader_args: list[str],
) -> float:
    """Autograde ``staged`` submissions in ``workers`` processes at once.

    ``batch`` are the assignment arguments of nbgrader ("*" or ids); every
    worker runs ``nbgrader autograde`` once per batch entry on its own part.
    Returns the wall-clock seconds. Output lines are prefixed ``[w<k>]``."""
    from grader.nbgrader_cli import nbgrader_command

    ordered = sorted(staged, key=lambda s: (s.assignment, s.student))
    parts = partition(ordered, workers)
    base = state / "parts"
    shutil.rmtree(base, ignore_errors=True)
    for k, part in enumerate(parts):
        for s in part:
            src = state / "staged" / s.student / s.assignment
            shutil.copytree(src, base / str(k) / s.student / s.assignment)
    env = kernel_env()
    print(
        f"autograde: {len(staged)} submissions in {len(parts)} workers "
        f"({', '.join(str(len(p)) for p in parts)}), "
        f"{env['OMP_NUM_THREADS']} thread(s) per kernel",
        flush=True,
    )
    failures = []

    def work(k: int) -> None:
        for assignment in batch:
            cmd, cmd_env = nbgrader_command(
                "autograde",
                assignment,
                f"--CourseDirectory.submitted_directory={base / str(k)}",
                *nbgrader_args,
                env=env,
            )
            proc = subprocess.Popen(
                cmd,
                cwd=root,
                env=cmd_env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            _pump(proc.stdout, f"[w{k}] ")
            if proc.wait():
                failures.append((k, assignment, proc.returncode))

    start = time.monotonic()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(parts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    for k, assignment, code in failures:
        print(
            f"[w{k}] nbgrader autograde {assignment} exited with {code}; its "
            f"submissions without a grade are scored 0 below",
            flush=True,
        )
    shutil.rmtree(base, ignore_errors=True)
    return seconds
