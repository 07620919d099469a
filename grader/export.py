"""``grades.csv`` that a spreadsheet opens as data, never as formulas.

nbgrader's ``CsvExportPlugin`` joins the fields with commas as they are: a
student id ``=1+2`` (or ``@SUM(...)``, ``+cmd|...``) lands in the file as a
formula that a spreadsheet evaluates when the instructor opens it, and a
comma or newline in a name shifts every later column. ``SafeCsvExport``
writes the same columns and rows through :mod:`csv` (quoted as needed) and
turns every text cell that a spreadsheet would read as a formula into text
by a leading apostrophe (OWASP's advice for CSV injection). Numbers stay
numbers: a score is written from a float, never from student text.

``nbgrader_config.py`` makes it the export plugin, so ``python -m grader
grade`` (its export step), plain ``nbgrader export`` and the formgrader's
export all write the safe file.
"""

import csv

from nbgrader.api import MissingEntry
from nbgrader.plugins.export import CsvExportPlugin

COLUMNS = (
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
)
# What a spreadsheet treats as the start of a formula (or of a DDE payload):
# = + - @, and a tab or carriage return before them.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def cell(value) -> str:
    """One CSV cell: numbers as they are, text defused when it could be read
    as a formula."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return repr(float(value)) if isinstance(value, float) else str(value)
    text = str(value)
    if text.startswith(FORMULA_START):
        return "'" + text
    return text


class SafeCsvExport(CsvExportPlugin):
    """nbgrader's CSV export with quoting and formula-leading cells defused."""

    def export(self, gradebook) -> None:
        dest = self.to or "grades.csv"
        students = {str(s) for s in self.student}
        assignments = {str(a) for a in self.assignment}
        self.log.info("Exporting grades to %s (formula-safe CSV)", dest)
        with open(dest, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(COLUMNS)
            for assignment in gradebook.assignments:
                if assignments and assignment.name not in assignments:
                    continue
                for student in gradebook.students:
                    if students and student.id not in students:
                        continue
                    out.writerow(cell(v) for v in _row(gradebook, assignment, student))


def _row(gradebook, assignment, student) -> tuple:
    try:
        sub = gradebook.find_submission(assignment.name, student.id)
    except MissingEntry:
        timestamp, raw, penalty, score = "", 0.0, 0.0, 0.0
    else:
        timestamp, raw = sub.timestamp, sub.score
        penalty = sub.late_submission_penalty
        score = max(0.0, raw - penalty)
    return (
        assignment.name,
        assignment.duedate,
        timestamp,
        student.id,
        student.last_name,
        student.first_name,
        student.email,
        raw,
        penalty,
        score,
        assignment.max_score,
    )
