"""Locks and settings every grader process shares.

Grading runs on Dask (``grader.cluster``, ``grader.dispatch``): one task per
submission on the workers of an embedded local cluster or of a cluster on
several machines, all writing one gradebook (PostgreSQL, ``NBGRADER_DB_URL``,
across machines). Every student kernel runs with one thread (OMP / MKL /
TensorFlow variables, passed into the sandbox, unless the grader sets them):
the exercises' tensors are tiny, and a second thread made them slower even
alone (``make bench-grading``: the six reference notebooks ran in 30 s with
one thread and 42 s with two, on two cores); more cores are used by more
workers.

Steps that create shared rows must not run at the same time in two
processes: two ``generate_assignment`` runs, or two autogrades creating the
same student, both INSERT the same key and one fails. ``gradebook_lock``
serialises those steps: a PostgreSQL advisory lock (held by one connection
for as long as the step runs), or, for SQLite, an exclusive ``flock`` on a
file beside the database. ``ensure_students`` creates every student's row
under that lock before the tasks start, so autograde only updates rows that
exist.

One grading run at a time per course: ``hold_course_lock`` refuses a second
run on the same course folder, and ``hold_gradebook_run`` a second client on
the same shared gradebook and course (another machine's course copy): two
runs would grade the same submissions and the last one would win. The
second run is refused (``CourseBusy``) at its start, before it stages
anything; it can run when the first has finished.
"""

import contextlib
import fcntl
import os
import time
import zlib
from pathlib import Path

LOCK_KEY = 0x6174746E  # "attn": the advisory-lock key every grader uses
RUN_LOCK_KEY = 0x72756E  # "run": with the course, the lock of a whole run
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


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


def hold_gradebook_run(db_url: str, course_id: str):
    """For a PostgreSQL gradebook: hold its run lock for ``course_id`` on a
    connection that stays open for the rest of the run (returned; None for
    SQLite, which only graders on one machine share: ``hold_course_lock``).
    Raises ``CourseBusy`` when another client holds it."""
    if not is_postgres(db_url):
        return None
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(db_url, future=True, poolclass=NullPool)
    conn = engine.connect()
    course_key = zlib.crc32(course_id.encode()) - 2**31  # a signed 32-bit int
    taken = conn.execute(
        text("SELECT pg_try_advisory_lock(:a, :b)"),
        {"a": RUN_LOCK_KEY, "b": course_key},
    ).scalar()
    conn.commit()
    if not taken:
        conn.close()
        engine.dispose()
        raise CourseBusy(
            f"another grading run is grading course {course_id!r} into the "
            f"shared gradebook (a PostgreSQL advisory lock, held until that "
            f"run ends)"
        )
    return conn
