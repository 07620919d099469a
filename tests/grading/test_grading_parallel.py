"""The pieces of parallel grading, without grading (fast).

End to end: test_exercises_grading grades the whole course with two workers;
test_gradebook_postgres runs two graders against one PostgreSQL gradebook.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import events, parallel
from grader.nbgrader_cli import nbgrader_command

BIN = str(Path(sys.executable).parent)
ROOT = Path(__file__).resolve().parents[2]


def test_partition_covers_every_item_once_and_balances():
    items = [(a, s) for a in "abc" for s in range(5)]
    for workers in (1, 2, 3, 4, 20):
        parts = parallel.partition(items, workers)
        flat = [x for p in parts for x in p]
        assert sorted(flat) == sorted(items) and len(flat) == len(set(flat))
        assert len(parts) == min(workers, len(items))
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1
    # sorted by assignment, each part gets its share of every assignment
    two = parallel.partition(items, 2)
    for a in "abc":
        counts = [sum(1 for x in p if x[0] == a) for p in two]
        assert max(counts) - min(counts) <= 1
    with pytest.raises(ValueError, match="workers must be at least 1"):
        parallel.partition(items, 0)


def test_kernels_get_one_thread_unless_the_grader_says_otherwise():
    env = parallel.kernel_env(base={"OMP_NUM_THREADS": "3", "PATH": "/bin"})
    assert env["OMP_NUM_THREADS"] == "3"  # set by the instructor: kept
    assert env["PATH"] == "/bin"
    for var in parallel.THREAD_VARS[1:]:
        assert env[var] == "1"
    from grader import sandbox

    assert set(parallel.THREAD_VARS) <= set(sandbox.PASS_ENV)  # reach the kernel


def test_database_urls():
    assert parallel.is_postgres("postgresql+psycopg2://u@h:5432/db")
    assert parallel.is_postgres("postgresql://u@h/db")
    assert not parallel.is_postgres("sqlite:///gradebook.db")
    assert parallel.sqlite_path("sqlite:////course/gradebook.db") == Path(
        "/course/gradebook.db"
    )
    assert parallel.sqlite_path("sqlite:///:memory:") is None
    assert parallel.sqlite_path("postgresql://u@h/db") is None


HOLD = """
import sys, time
from grader import parallel
with parallel.gradebook_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    print("releasing", time.monotonic(), flush=True)  # still held here
"""


def test_sqlite_lock_makes_a_second_grader_wait(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, url, "2"], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "locked"
    with parallel.gradebook_lock(url):
        got = time.monotonic()  # CLOCK_MONOTONIC: one clock for both processes
    holder.wait(timeout=30)
    word, released = holder.stdout.readline().split()
    # The holder wrote its time while it still held the lock: we got the lock
    # after that, however late either process was scheduled on a busy machine.
    assert word == "releasing" and got >= float(released), (
        "the lock did not wait for the other grader"
    )
    with pytest.raises(TimeoutError, match="another grader holds"):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, url, "5"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline().strip() == "locked"
            with parallel.gradebook_lock(url, timeout=0.5):
                pass
        finally:
            holder.kill()
            holder.wait()


def test_ensure_students_creates_missing_rows_only(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", os.pathsep.join([BIN, os.environ.get("PATH", "")]))
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url, "c") as gb:
        gb.add_student("alice", first_name="Alice")
    parallel.ensure_students(url, "c", ["alice", "bob", "bob"])
    parallel.ensure_students(url, "c", ["bob"])
    with Gradebook(url, "c") as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob"]
        assert gb.find_student("alice").first_name == "Alice"  # untouched


def test_event_timings_add_up_and_survive_other_phases(tmp_path):
    ev = events.Events(tmp_path, "addressing", "alice", "execute")
    ev.time("cells", 1.5)
    ev.time("cells", 0.25)
    ev.time("kernel_start", 4)
    ev.save()
    other = events.Events(tmp_path, "addressing", "alice", "verdicts")
    other.save()
    assert events.timings(tmp_path, "addressing", "alice") == {
        "cells": 1.75,
        "kernel_start": 4,
    }
    assert events.timings(tmp_path, "addressing", "bob") == {}


def test_nbgrader_runs_without_the_slow_optional_import():
    cmd, env = nbgrader_command("--version")
    assert cmd[1:3] == ["-m", "grader.nbgrader_cli"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import nbgrader

    assert nbgrader.__version__ in out.stdout + out.stderr
    probe = (
        "import sys, grader.nbgrader_cli; "
        "import nbformat, jsonschema; "
        "print(sys.modules.get('rfc3987_syntax'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "None", out.stderr


HOLD_COURSE = """
import sys, time
from grader import parallel
handle = parallel.hold_course_lock(sys.argv[1])
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_grading_run_on_one_course_is_refused(tmp_path):
    """Two runs on one course folder would stage and clear each other's
    submissions: the second stops at once, grading nothing."""
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    state = course / ".grading"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_COURSE, str(state)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(parallel.CourseBusy, match=f"pid {holder.pid}"):
            parallel.hold_course_lock(state)
        run = subprocess.run(
            [sys.executable, "-m", "grader", "grade", "--root", str(course)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(course)},
        )
        assert run.returncode == 2, run.stdout + run.stderr
        assert "another grading run" in run.stdout
        assert "Nothing was graded" in run.stdout
        assert not (course / "gradebook.db").exists()
    finally:
        holder.kill()
        holder.wait()
    # the lock goes with the process that held it
    handle = parallel.hold_course_lock(state)
    handle.close()
