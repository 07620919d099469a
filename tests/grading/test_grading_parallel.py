"""The pieces of parallel grading, without grading (fast).

End to end: test_exercises_grading grades the whole course on the embedded
Dask cluster; test_gradebook_postgres grades into one PostgreSQL gradebook on
a Dask scheduler with workers of its own (a lost worker, refused workers, a
second client refused).
"""

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import cluster, events, locks
from grader.nbgrader_cli import nbgrader_command

BIN = str(Path(sys.executable).parent)
ROOT = Path(__file__).resolve().parents[2]


def _course_files(dest: Path) -> Path:
    for name in cluster.VERSIONED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__py*"))
        else:
            shutil.copy(src, dest / name)
    return dest


def test_the_course_version_follows_every_file_that_decides_a_grade(tmp_path):
    course = _course_files(tmp_path / "course")
    first = cluster.course_version(course)
    assert cluster.course_version(course) == first  # stable
    (course / "grader" / "__pycache__").mkdir(exist_ok=True)
    (course / "grader" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert cluster.course_version(course) == first  # caches do not count
    hidden = next((course / "solutions").glob("*/hidden/reference.npz"))
    data = hidden.read_bytes()
    hidden.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert cluster.course_version(course) != first  # reference data
    hidden.write_bytes(data)
    with open(course / "grader" / "notebooks.py", "a") as f:
        f.write("# changed\n")
    assert cluster.course_version(course) != first  # the grader


def test_a_stale_worker_refuses_its_task_naming_itself_and_the_reason(
    tmp_path, monkeypatch
):
    course = _course_files(tmp_path / "course")
    monkeypatch.setenv(cluster.ROOT_ENV, str(course))
    task = cluster.Task("ada", "addressing", "addressing", {}, 1, "0" * 16, "", "c")
    with pytest.raises(cluster.WorkerRefused) as caught:
        cluster.grade_task(task)
    text = str(caught.value)
    assert "refused ada/addressing" in text and "(pid " in text
    assert f"version {cluster.course_version(course)}" in text and "0" * 16 in text
    good = cluster.Task(**{**vars(task), "version": cluster.course_version(course)})
    monkeypatch.setenv("GRADER_BWRAP", str(tmp_path / "no-bwrap"))
    with pytest.raises(cluster.WorkerRefused, match="cannot start the sandbox"):
        cluster.grade_task(good)
    missing = f"sqlite:///{tmp_path / 'elsewhere' / 'gradebook.db'}"
    off = cluster.Task(**{**vars(good), "sandboxed": False, "db_url": missing})
    with pytest.raises(cluster.WorkerRefused, match="cannot reach the gradebook"):
        cluster.grade_task(off)


def test_returned_files_stay_inside_their_folder(tmp_path):
    cluster.write_tree(tmp_path / "a" / "b", {"n.ipynb": b"{}", "d/e.txt": b"x"})
    assert cluster.read_tree(tmp_path / "a" / "b") == {
        "d/e.txt": b"x",
        "n.ipynb": b"{}",
    }
    for name in ("../escape.txt", "/etc/passwd-copy", "d/../../x"):
        with pytest.raises(ValueError, match="outside its folder"):
            cluster.write_tree(tmp_path / "a" / "c", {name: b"x"})
    assert not (tmp_path / "a" / "escape.txt").exists()


def test_command_line_limits_become_the_workers_config():
    assert cluster.parse_overrides(
        [
            "--Execute.timeout=60",
            "--SandboxedKernelManager.sandbox=False",
            "--SandboxedKernelManager.memory_limit=1073741824",
            "--force",
        ]
    ) == {
        "Execute": {"timeout": 60},
        "SandboxedKernelManager": {"sandbox": False, "memory_limit": 2**30},
    }


def test_a_workers_private_state_draws_the_clients_inputs(tmp_path):
    from grader import fresh

    client, worker = tmp_path / "client", tmp_path / "worker"
    seed = fresh.seed_for(fresh.secret(client), "addressing", "ada")
    assert fresh.student_seed(worker, "addressing", "ada") != seed  # its own secret
    fresh.pin_seed(worker, "addressing", "ada", seed)
    assert fresh.student_seed(worker, "addressing", "ada") == seed
    assert fresh.student_seed(worker, "addressing", "bob") == fresh.seed_for(
        fresh.secret(worker), "addressing", "bob"
    )


def test_a_workers_log_sections_replace_the_same_phases(tmp_path):
    mine = events.Events(tmp_path, "addressing", "ada", "stage")
    mine.flag("renamed", "was x.ipynb")
    mine.save()
    old = events.Events(tmp_path, "addressing", "ada", "execute")
    old.flag("timeout", "old run")
    old.save()
    events.merge(
        tmp_path,
        "addressing",
        "ada",
        {"execute": {"flags": {}, "notes": ["new run"]}, "bogus": {"flags": {}}},
    )
    data = events.read_file(events.path(tmp_path, "addressing", "ada"))
    assert set(data) == {"stage", "execute"}
    assert events.load(tmp_path, "addressing", "ada") == {
        "flags": {"renamed": ["was x.ipynb"]},
        "notes": ["[renamed] was x.ipynb", "new run"],
    }


def test_kernels_get_one_thread_unless_the_grader_says_otherwise():
    env = locks.kernel_env(base={"OMP_NUM_THREADS": "3", "PATH": "/bin"})
    assert env["OMP_NUM_THREADS"] == "3"  # set by the instructor: kept
    assert env["PATH"] == "/bin"
    for var in locks.THREAD_VARS[1:]:
        assert env[var] == "1"
    from grader import sandbox

    assert set(locks.THREAD_VARS) <= set(sandbox.PASS_ENV)  # reach the kernel


def test_database_urls():
    assert locks.is_postgres("postgresql+psycopg2://u@h:5432/db")
    assert locks.is_postgres("postgresql://u@h/db")
    assert not locks.is_postgres("sqlite:///gradebook.db")
    assert locks.sqlite_path("sqlite:////course/gradebook.db") == Path(
        "/course/gradebook.db"
    )
    assert locks.sqlite_path("sqlite:///:memory:") is None
    assert locks.sqlite_path("postgresql://u@h/db") is None


HOLD = """
import sys, time
from grader import locks
with locks.gradebook_lock(sys.argv[1]):
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
    with locks.gradebook_lock(url):
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
            with locks.gradebook_lock(url, timeout=0.5):
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
    locks.ensure_students(url, "c", ["alice", "bob", "bob"])
    locks.ensure_students(url, "c", ["bob"])
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
from grader import locks
handle = locks.hold_course_lock(sys.argv[1])
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
        with pytest.raises(locks.CourseBusy, match=f"pid {holder.pid}"):
            locks.hold_course_lock(state)
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
    handle = locks.hold_course_lock(state)
    handle.close()


def test_the_embedded_cluster_admits_only_its_own_client(tmp_path):
    """The workers run whatever a client of theirs sends: on a shared machine
    the students' own servers reach 127.0.0.1, so the embedded cluster speaks
    TLS with a key only the grading command holds, and its HTTP pages (the
    roster in task keys, call stacks: hostile review) serve nothing."""
    from distributed import Client
    from distributed.security import Security

    from grader import dispatch

    client, local = dispatch.open_cluster(None, 1, ROOT)
    try:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:"), address
        assert client.submit(sum, [1, 2]).result(timeout=60) == 3
        with pytest.raises((OSError, TimeoutError)):  # no TLS
            Client(address.replace("tls://", "tcp://"), timeout="3s")
        with pytest.raises((OSError, TimeoutError)):  # TLS with a key of its own
            Client(address, security=Security.temporary(), timeout="3s")
        # Dask's plain-HTTP pages (call stacks, logs, task keys) serve nothing
        info = client.scheduler_info()
        ports = [info["services"]["dashboard"]] + [
            w["services"]["dashboard"] for w in info["workers"].values()
        ]
        for port in ports:
            for page in ("/metrics", "/info/main/workers.html", "/json/identity.json"):
                with pytest.raises(urllib.error.HTTPError, match="404"):
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=5)
    finally:
        client.close()
        local.close()


def test_a_task_refused_by_a_worker_goes_to_another(tmp_path, monkeypatch):
    """A worker that joined after the client's check refuses its task: the
    task is sent to the others, the refusal is reported, nothing is lost."""
    from distributed import Client, LocalCluster, as_completed

    from grader import dispatch

    with (
        LocalCluster(
            n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None
        ) as local,
        Client(local) as client,
    ):
        bad = sorted(client.scheduler_info()["workers"])[0]

        def fake(task):
            from distributed import get_worker

            worker = get_worker().address
            if worker == bad:
                raise cluster.WorkerRefused(worker, task.key, "an older course")
            files = {f"{task.notebook}.ipynb": task.student.encode()}
            return {"success": True, "files": files, "events": {}, "worker": worker}

        monkeypatch.setattr(cluster, "grade_task", fake)
        tasks = {
            ("a", s): cluster.Task(s, "a", "a", {}, 0, "v", "", "c")
            for s in ("s1", "s2", "s3", "s4")
        }
        outcomes = {k: dispatch.Outcome() for k in tasks}
        summary = dispatch.Summary()
        dispatch._queue(
            client, tasks, outcomes, summary, tmp_path, tmp_path, as_completed
        )
    assert summary.refused == {bad: "an older course"}
    for (a, s), outcome in outcomes.items():
        assert not outcome.error and outcome.worker != bad
        assert (tmp_path / "autograded" / s / a / "a.ipynb").read_bytes() == s.encode()


def run_queue(tmp_path, students, processes: bool) -> dict:
    """``dispatch._queue`` on one single-threaded worker, one task per student
    of assignment ``a``; the outcomes."""
    from distributed import Client, LocalCluster, as_completed

    from grader import dispatch

    tasks = {("a", s): cluster.Task(s, "a", "a", {}, 0, "v", "", "c") for s in students}
    outcomes = {k: dispatch.Outcome() for k in tasks}
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
        ) as local,
        Client(local) as client,
    ):
        summary = dispatch.Summary()
        dispatch._queue(
            client, tasks, outcomes, summary, tmp_path, tmp_path, as_completed
        )
    return outcomes


def test_a_task_that_cannot_be_graded_is_a_grader_error_not_a_silent_zero(
    tmp_path, monkeypatch
):
    from distributed import KilledWorker

    from grader import dispatch

    def fake(task):
        if task.student == "lost":
            raise KilledWorker(task.key, SimpleNamespace(address="tcp://gone"), 3)
        if task.student == "broken":
            raise OSError("the worker's disk is full")
        return {"success": False, "error": "Traceback\nValueError: bad cell"}

    monkeypatch.setattr(cluster, "grade_task", fake)
    outcomes = run_queue(tmp_path, ("lost", "broken", "failed"), processes=False)
    assert "were lost more often than" in outcomes["a", "lost"].error
    assert "OSError: the worker's disk is full" in outcomes["a", "broken"].error
    assert "ValueError: bad cell" in outcomes["a", "failed"].error
    dispatch.record(tmp_path, outcomes, dispatch.Summary())
    for student in ("lost", "broken", "failed"):
        flags = events.load(tmp_path, "a", student)["flags"]
        assert list(flags) == ["grader-error"]
    assert not (tmp_path / "autograded").exists()


def test_a_task_that_kills_its_worker_takes_no_other_task_with_it(
    tmp_path, monkeypatch
):
    """Dask counts a lost worker against every task the worker held: the
    client gives each worker one task at a time, so only the crashing
    submissions run out of tries (hostile review: honest students queued
    behind them were scored 0 with them)."""
    import dask
    from support import cluster_fakes

    monkeypatch.setattr(cluster, "grade_task", cluster_fakes.crash_or_grade)
    students = ("bad1", "ada", "bad2", "bob", "cy", "dee")
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        outcomes = run_queue(tmp_path, students, processes=True)
    for (a, s), outcome in outcomes.items():
        if s.startswith("bad"):
            assert "were lost more often than" in outcome.error, s
        else:
            assert not outcome.error, (s, outcome.error)
            assert (
                tmp_path / "autograded" / s / a / "a.ipynb"
            ).read_bytes() == s.encode()
