"""grades.csv through the course's export plugin (``grader.export``): the real
``nbgrader export`` command on a small gradebook whose student ids and names
a spreadsheet would read as formulas or as extra columns."""

import csv
import os
import subprocess
import sys
from datetime import datetime

from nbgrader.api import Gradebook
from support.grading import ROOT, environment

from grader.export import cell

HOSTILE = {
    "=1+2": '=HYPERLINK("http://evil")',
    "+cmd": "@SUM(A1)",
    "-2+3": "tab\tname",
    "a,b\nc": 'quote"d',
}


def test_cells_that_read_as_formulas_become_text():
    assert cell("=1+2") == "'=1+2"
    assert cell("@SUM(A1)") == "'@SUM(A1)"
    assert cell("\t=1") == "'\t=1"
    assert cell("-x") == "'-x"
    assert cell("alice") == "alice"
    # numbers are written from numbers and stay numbers, negative ones too
    assert cell(-1.5) == "-1.5" and cell(3) == "3" and cell(None) == ""


def test_nbgrader_export_writes_a_formula_safe_csv(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(
        (ROOT / "nbgrader_config.py").read_text()
    )
    env = environment(ROOT)
    os.environ["PATH"] = env["PATH"]  # nbgrader's `alembic` for a new gradebook
    db = f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(db, course_id="attention-course") as gb:
        gb.update_or_create_assignment("addressing", duedate=datetime(2026, 1, 1))
        for student, last in HOSTILE.items():
            gb.update_or_create_student(student, last_name=last, first_name="x")
        gb.update_or_create_student("alice", last_name="Liddell", first_name="A")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "export", "--to", "grades.csv"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "formula-safe" in done.stderr, done.stderr
    with open(course / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(HOSTILE) + 1
    by_id = {r["student_id"]: r for r in rows}
    for student, last in HOSTILE.items():
        shown = by_id[cell(student)]  # quoted, never split into more columns
        assert shown["last_name"] == cell(last)
        assert shown["first_name"] == "x" and shown["score"] == "0.0"
        for value in shown.values():
            assert not value.startswith(("=", "+", "-", "@", "\t")), value
    assert by_id["alice"]["last_name"] == "Liddell"
    assert by_id["alice"]["max_score"] == "0.0"
