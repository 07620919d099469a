"""The nbgrader gradebook on a real PostgreSQL server (``NBGRADER_DB_URL``).

A PostgreSQL server of its own (tests/postgres_server.py: initdb in a
temporary folder, 127.0.0.1 on a free port, one empty database per test)
holds the gradebook instead of the course's gradebook.db:

* nbgrader's ``Gradebook`` API creates its tables there and reads back what it
  wrote;
* ``python -m grader grade --workers 2`` grades a temporary
  course copy with six students of ``addressing`` into it: one submission row
  per student, the expected score per test cell (reference solution full
  marks, the blank release 0, typical bugs lose their cells), grades.csv, and
  no SQLite file;
* two course copies (two graders' machines) share one PostgreSQL gradebook and
  start ``grade_all`` at the same time on halves of the students: the second
  is refused at its start (one run per course and gradebook), grades nothing,
  and grades its half once the first has finished: one submission row per
  student with the right scores, no duplicates, and a later ``--force``
  regrade changes nothing;
* a real Dask cluster on loopback -- ``dask scheduler`` and four
  ``python -m grader worker`` processes: two good ones, one whose course copy
  differs and one that cannot start the sandbox -- grades the students plus
  ``sleeper`` (a correct solution that sleeps 15 s) with ``--scheduler``; the
  test SIGKILLs the worker that is grading ``sleeper``: it is graded again on
  the other one, the report says which worker was lost and names the two
  refused workers with their reasons, and scores, flags and gradebook rows are
  the ones the embedded cluster of (b) produced.

The submissions are the ones test_exercises_grading builds (reference, blank,
bug1, bug2) plus bug3 (test_exercises_bugs) and a second reference. Needs
PostgreSQL (apt-get install postgresql) and psycopg2: skipped without them,
failed when CI=true. The repository is not touched.
"""

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.ci import skip_or_fail
from support.grading import (
    ROOT,
    copy_course,
    environment,
    expected_lost,
    make_course,
    points,
    student_solutions,
)
from support.postgres import postgres_server, postgres_url  # noqa: F401

from grader import notebooks as nbs

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.postgres]

A = "addressing"
COURSE = "attention-course"
WORKERS = 2
CELL_TIMEOUT = 60
TIMEOUT = 600  # seconds for one grade_all run
EXTRA = ("bug3", "reference-2")  # beyond make_course's reference, blank, bug1, bug2
STUDENTS = ("reference", "blank", "bug1", "bug2", *EXTRA)
HALVES = (("reference", "blank", "bug3"), ("bug1", "bug2", "reference-2"))
SLEEPER = "sleeper"  # a correct solution that sleeps in a solution cell
SLEEP = 15  # long enough to be killed while grading (the kill comes SLEEP / 3 in)


def expected_scores(student: str) -> dict:
    """grade id -> the points this student's notebook must score."""
    full = points(A)
    if student == "blank":
        return dict.fromkeys(full, 0)
    honest = student.startswith("reference") or student == SLEEPER
    lost = set() if honest else expected_lost(A, student)
    return {g: 0 if g in lost else p for g, p in full.items()}


def build_course(dest: Path) -> Path:
    """A course copy with ``addressing`` and the six students' submissions."""
    make_course(dest, [A])
    release = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
    for student in EXTRA:
        solutions = student_solutions(A, student.split("-")[0])
        nbs.write(
            nbs.submission(release, solutions),
            dest / "submitted" / student / A / f"{A}.ipynb",
        )
    assert sorted(p.name for p in (dest / "submitted").iterdir()) == sorted(STUDENTS)
    return dest


def start_grading(root: Path, db_url: str, *args, log_name="grade_all.log"):
    """``grade_all`` on ``root`` with the gradebook at ``db_url`` (not waited)."""
    env = environment(root)
    env["NBGRADER_DB_URL"] = db_url
    log = open(root / log_name, "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            "--workers",
            str(WORKERS),
            "--cell-timeout",
            str(CELL_TIMEOUT),
            *args,
            A,
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return log, proc


def finish(log, proc) -> int | str:
    try:
        return proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "timeout"
    finally:
        log.close()


def log_tail(root: Path, name="grade_all.log", chars=6000) -> str:
    return f"{root / name}:\n" + (root / name).read_text()[-chars:]


def gradebook_rows(db_url: str) -> dict:
    """What the PostgreSQL gradebook holds for ``addressing``, read with SQL."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            assignments = conn.execute(
                text("SELECT count(*) FROM assignment WHERE name = :a"), {"a": A}
            ).scalar()
            submissions = conn.execute(
                text(
                    "SELECT st.id, count(sa.id) FROM submitted_assignment sa "
                    "JOIN student st ON st.id = sa.student_id "
                    "JOIN assignment a ON a.id = sa.assignment_id "
                    "WHERE a.name = :a GROUP BY st.id"
                ),
                {"a": A},
            ).all()
            grades = conn.execute(
                text(
                    "SELECT st.id, sa.id, sn.id, bc.name, "
                    "COALESCE(g.manual_score, g.auto_score) "
                    "FROM submitted_assignment sa "
                    "JOIN student st ON st.id = sa.student_id "
                    "JOIN assignment a ON a.id = sa.assignment_id "
                    "JOIN submitted_notebook sn ON sn.assignment_id = sa.id "
                    "JOIN grade g ON g.notebook_id = sn.id "
                    "JOIN base_cell bc ON bc.id = g.cell_id "
                    "WHERE a.name = :a"
                ),
                {"a": A},
            ).all()
            students = conn.execute(text("SELECT id FROM student")).scalars().all()
    finally:
        engine.dispose()
    scores, grade_rows, ids = {}, {}, {}
    for student, sub_id, nb_id, cell, score in grades:
        scores.setdefault(student, {})[cell] = score
        grade_rows[student] = grade_rows.get(student, 0) + 1
        ids.setdefault(student, set()).add((sub_id, nb_id))
    return {
        "assignments": assignments,
        "submissions": dict(submissions),
        "scores": scores,
        "grade_rows": grade_rows,
        "ids": ids,
        "students": sorted(students),
    }


def check_gradebook(rows: dict, students) -> None:
    """One submission (one notebook, one grade per test cell) per student, each
    with its expected scores."""
    cells = points(A)
    assert rows["assignments"] == 1
    assert rows["submissions"] == dict.fromkeys(students, 1)
    assert sorted(rows["students"]) == sorted(students)
    for student in students:
        assert rows["grade_rows"][student] == len(cells), student
        assert len(rows["ids"][student]) == 1, student  # one submitted notebook
        assert rows["scores"][student] == pytest.approx(expected_scores(student)), (
            student
        )


def grades_csv(root: Path) -> list[dict]:
    return [
        r for r in csv.DictReader(open(root / "grades.csv")) if r["assignment"] == A
    ]


@pytest.fixture(scope="module")
def sandbox_tools():
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")


# ------------------------------------------------------------------- (a)
@pytest.mark.filterwarnings("ignore:Object of type <SubmittedAssignment> not in")
def test_gradebook_api_on_postgres(postgres_url, monkeypatch):  # noqa: F811
    from nbgrader.api import Gradebook, MissingEntry

    # a new gradebook asks the `alembic` executable for its version
    monkeypatch.setenv("PATH", environment(ROOT)["PATH"])
    with Gradebook(postgres_url, COURSE) as gb:
        gb.add_assignment("sanity", duedate="2030-01-01 12:00:00")
        gb.add_student("ada", first_name="Ada", last_name="Lovelace")
        gb.add_submission("sanity", "ada")
    with Gradebook(postgres_url, COURSE) as gb:  # a second connection reads it
        assert [a.name for a in gb.assignments] == ["sanity"]
        student = gb.find_student("ada")
        assert (student.first_name, student.last_name) == ("Ada", "Lovelace")
        sub = gb.find_submission("sanity", "ada")
        assert sub.student.id == "ada" and sub.assignment.name == "sanity"
        assert str(gb.find_assignment("sanity").duedate).startswith("2030-01-01")
        with pytest.raises(MissingEntry):
            gb.find_student("nobody")
        assert gb.db.get_bind().dialect.name == "postgresql"


# ------------------------------------------------------------------- (b)
@pytest.fixture(scope="module")
def one_machine(postgres_server, sandbox_tools, tmp_path_factory):  # noqa: F811
    """grade_all on the embedded Dask cluster, into PostgreSQL."""
    url = postgres_server.create_database(f"one_{uuid.uuid4().hex[:12]}")
    root = build_course(tmp_path_factory.mktemp("postgres-one") / "course")
    start = time.monotonic()
    code = finish(*start_grading(root, url))
    print(
        f"\ngrade_all --workers {WORKERS}, {len(STUDENTS)} students: "
        f"{time.monotonic() - start:.0f} s"
    )
    return {"url": url, "root": root, "code": code}


def test_grade_all_into_postgres(one_machine):
    root, url = one_machine["root"], one_machine["url"]
    assert one_machine["code"] == 0, log_tail(root)
    check_gradebook(gradebook_rows(url), STUDENTS)
    rows = grades_csv(root)
    assert sorted(r["student_id"] for r in rows) == sorted(STUDENTS)
    report = json.loads((root / "grading-report.json").read_text())
    assert {r["student"]: r["score"] for r in report["rows"]} == pytest.approx(
        {s: sum(expected_scores(s).values()) for s in STUDENTS}
    )
    assert report["cluster"]["embedded"]
    assert len(report["cluster"]["workers"]) == WORKERS
    assert not (root / "gradebook.db").exists()
    assert not list(root.rglob("gradebook.db*"))  # nothing went to SQLite


# ------------------------------------------------------------------- (c)
@pytest.fixture(scope="module")
def two_graders(postgres_server, sandbox_tools, tmp_path_factory):  # noqa: F811
    """Two course copies start grading halves into one gradebook at once; the
    one refused runs again when the other has finished."""
    url = postgres_server.create_database(f"shared_{uuid.uuid4().hex[:12]}")
    base = tmp_path_factory.mktemp("postgres-graders")
    roots = [build_course(base / f"machine{i}") for i in (1, 2)]
    start = time.monotonic()
    runs = [
        start_grading(root, url, "--students", ",".join(half))
        for root, half in zip(roots, HALVES, strict=True)
    ]
    codes = [finish(*run) for run in runs]
    again = []
    for root, half, code in zip(roots, HALVES, codes, strict=True):
        if code == 2:
            shutil.copy(root / "grade_all.log", root / "refused.log")
            again.append(
                finish(*start_grading(root, url, "--students", ",".join(half)))
            )
    print(
        f"\ntwo graders, one refused and run again, {len(STUDENTS)} students: "
        f"{time.monotonic() - start:.0f} s"
    )
    return {"url": url, "roots": roots, "codes": codes, "again": again}


def test_a_second_grader_on_the_shared_gradebook_is_refused(two_graders):
    assert sorted(two_graders["codes"]) == [0, 2], two_graders["codes"]
    refused = [r for r in two_graders["roots"] if (r / "refused.log").exists()]
    assert len(refused) == 1
    text = (refused[0] / "refused.log").read_text()
    assert "another grading run is grading course 'attention-course'" in text
    assert "Nothing was graded" in text and "$ nbgrader" not in text
    assert two_graders["again"] == [0], log_tail(refused[0])


def test_two_graders_share_one_gradebook(two_graders):
    if two_graders["again"] != [0]:
        pytest.skip("the second grader did not finish (see the test above)")
    check_gradebook(gradebook_rows(two_graders["url"]), STUDENTS)
    for root, half in zip(two_graders["roots"], HALVES, strict=True):
        assert not list(root.rglob("gradebook.db*"))
        # each machine graded its half; the export holds the gradebook as it
        # was: the second run's export holds everyone
        assert {p.parent.name for p in (root / "autograded").glob(f"*/{A}")} == set(
            half
        )
        exported = {r["student_id"] for r in grades_csv(root)}
        last = (root / "refused.log").exists()
        assert exported == set(STUDENTS) if last else set(half) <= exported


def test_forced_regrade_changes_nothing(two_graders):
    """Machine 1 regrades one of its students and one of machine 2's."""
    url, root = two_graders["url"], two_graders["roots"][0]
    if two_graders["again"] != [0]:
        pytest.skip("the two graders failed (see the tests above)")
    before = gradebook_rows(url)
    again = [HALVES[0][0], HALVES[1][1]]
    code = finish(
        *start_grading(
            root, url, "--force", "--students", ",".join(again), log_name="regrade.log"
        )
    )
    assert code == 0, log_tail(root, "regrade.log")
    after = gradebook_rows(url)
    assert after["scores"] == before["scores"]
    assert after["submissions"] == before["submissions"]
    assert after["grade_rows"] == before["grade_rows"]
    assert after["students"] == before["students"]
    assert after["ids"] == before["ids"]  # the same rows, updated in place
    check_gradebook(after, STUDENTS)


# ------------------------------------------------------------------- (d)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sleeper_course(dest: Path) -> Path:
    """The students of (b) and ``sleeper``: the reference solution whose first
    solution cell sleeps first."""
    build_course(dest)
    release = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
    solutions = student_solutions(A, "reference")
    first = next(iter(solutions))
    solutions[first] = f"import time\ntime.sleep({SLEEP})\n" + solutions[first]
    nbs.write(
        nbs.submission(release, solutions),
        dest / "submitted" / SLEEPER / A / f"{A}.ipynb",
    )
    return dest


class Cluster:
    """``dask scheduler`` and named ``python -m grader worker`` processes."""

    def __init__(self, base: Path):
        self.base, self.address = base, f"tcp://127.0.0.1:{free_port()}"
        self.procs = {}
        port = self.address.rsplit(":", 1)[1]
        self._start(
            "scheduler",
            [str(Path(sys.executable).parent / "dask"), "scheduler"]
            + ["--host", "127.0.0.1", "--port", port, "--no-dashboard"],
            dict(os.environ),
        )

    def _start(self, name, cmd, env):
        log = open(self.base / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.base
        )

    def worker(self, name: str, course: Path, **env) -> None:
        self._start(
            name,
            [sys.executable, "-m", "grader", "worker", self.address]
            + ["--name", name, "--no-nanny", "--no-dashboard"],
            {**environment(course), "GRADER_COURSE_ROOT": str(course), **env},
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


def kill_the_sleepers_worker(client, cluster, deadline) -> str:
    """SIGKILL the worker that started grading ``sleeper``; its address."""
    from grader import cluster as grading

    key = f"{SLEEPER}/{A}"
    while time.monotonic() < deadline:
        for _, msg in client.get_events(grading.EVENTS):
            if isinstance(msg, dict) and msg.get("key") == key:
                name = client.scheduler_info()["workers"][msg["worker"]]["name"]
                time.sleep(SLEEP / 3)  # well inside the sleeping cell
                cluster.procs[name].send_signal(signal.SIGKILL)
                return msg["worker"]
        time.sleep(0.5)
    raise AssertionError("no worker started grading the sleeper")


@pytest.fixture(scope="module")
def on_a_cluster(postgres_server, sandbox_tools, tmp_path_factory):  # noqa: F811
    from distributed import Client

    url = postgres_server.create_database(f"dask_{uuid.uuid4().hex[:12]}")
    base = tmp_path_factory.mktemp("dask")
    root = sleeper_course(base / "course")
    stale = base / "stale"
    copy_course(stale, [A])
    with open(stale / "grader" / "notebooks.py", "a") as f:
        f.write("# an older grader\n")
    cluster = Cluster(base)
    try:
        for name in ("good-1", "good-2"):
            cluster.worker(name, root)
        cluster.worker("stale", stale)
        cluster.worker("no-sandbox", root, GRADER_BWRAP=str(base / "no-bwrap"))
        with Client(cluster.address, timeout="60s") as client:
            client.wait_for_workers(4, timeout=180)
            names = {
                a: w["name"] for a, w in client.scheduler_info()["workers"].items()
            }
            start = time.monotonic()
            run = start_grading(root, url, "--scheduler", cluster.address)
            killed = kill_the_sleepers_worker(client, cluster, start + 300)
            code = finish(*run)
        print(f"\ngrade_all on a Dask cluster: {time.monotonic() - start:.0f} s")
    finally:
        cluster.stop()
    return {"url": url, "root": root, "code": code, "killed": killed, "names": names}


def report_rows(root: Path) -> dict:
    report = json.loads((root / "grading-report.json").read_text())
    return {r["student"]: r for r in report["rows"]}


def test_a_cluster_grades_as_one_machine_does(on_a_cluster, one_machine):
    root = on_a_cluster["root"]
    assert on_a_cluster["code"] == 0, log_tail(root)
    # one submission, one set of rows per student: the sleeper's retry too
    check_gradebook(gradebook_rows(on_a_cluster["url"]), (*STUDENTS, SLEEPER))
    here, there = report_rows(root), report_rows(one_machine["root"])
    for student in STUDENTS:
        assert (here[student]["score"], here[student]["flags"]) == (
            there[student]["score"],
            there[student]["flags"],
        ), student
    assert here[SLEEPER]["score"] == sum(points(A).values())
    assert here[SLEEPER]["flags"] == []


def test_a_lost_worker_is_regraded_elsewhere_and_reported(on_a_cluster):
    root, killed = on_a_cluster["root"], on_a_cluster["killed"]
    note = f"the Dask worker {killed} was lost while grading this submission"
    assert any(n.startswith(note) for n in report_rows(root)[SLEEPER]["notes"])
    names = on_a_cluster["names"]
    graded_on = re.search(
        rf"{SLEEPER}/{A}: graded on (\S+) ", log_tail(root, chars=10**6)
    )
    assert graded_on and names[graded_on.group(1)] in ("good-1", "good-2")
    assert graded_on.group(1) != killed


def test_workers_that_cannot_grade_are_refused_with_their_reasons(on_a_cluster):
    root, names = on_a_cluster["root"], on_a_cluster["names"]
    report = json.loads((root / "grading-report.json").read_text())
    refused = {names[w]: why for w, why in report["cluster"]["refused"].items()}
    assert set(refused) == {"stale", "no-sandbox"}
    assert "the client's is" in refused["stale"] and "/stale)" in refused["stale"]
    assert "cannot start the sandbox" in refused["no-sandbox"]
    log = log_tail(root, chars=10**6)
    graded_on = set(re.findall(r": graded on (\S+) ", log))
    assert {names[w] for w in graded_on} <= {"good-1", "good-2"}
