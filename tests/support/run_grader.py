"""The one way the tests run the real grading command.

    graded = grade(root, "--cell-timeout", "60")
    graded.code, graded.seconds, graded.rows["mallory"], graded.scores, graded.tail()

``grade`` runs ``python -m grader grade ARGS`` in the course copy ``root``
(the environment of ``support.grading.environment``: this Python first on
PATH, the copy's packages on PYTHONPATH), logs to ``root/<log>`` and returns a
``Graded``: the exit code (``None`` when it ran past ``timeout`` and was
killed), the wall time, and lazy views of the report, the gradebook's scores
and the log. ``start`` does the same without waiting, for runs that go side
by side (``Running.wait()`` gives the ``Graded``).
"""

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from support.grading import environment, read_scores

TIMEOUT = 900  # seconds for one whole grading run unless told otherwise


@dataclass
class Graded:
    root: Path
    args: tuple
    code: int | None  # None: killed after the timeout
    seconds: float
    log_name: str = "grade_all.log"
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def log(self) -> str:
        path = self.root / self.log_name
        return path.read_text(errors="replace") if path.exists() else ""

    def tail(self, chars: int = 4000) -> str:
        """The end of the log, for assertion messages."""
        return f"grade {' '.join(self.args)} -> {self.code}\n" + self.log[-chars:]

    @cached_property
    def report(self) -> dict:
        """The whole grading-report.json ({} if the run wrote none)."""
        path = self.root / "grading-report.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @cached_property
    def rows(self) -> dict:
        """student -> the report's row (one assignment per course) ."""
        return {r["student"]: r for r in self.report.get("rows", [])}

    @cached_property
    def pairs(self) -> dict:
        """(assignment, student) -> the report's row."""
        return {(r["assignment"], r["student"]): r for r in self.report.get("rows", [])}

    @cached_property
    def scores(self) -> dict:
        """(assignment, student) -> {grade_id: score} from the gradebook."""
        return read_scores(self.root)


@dataclass
class Running:
    root: Path
    args: tuple
    proc: subprocess.Popen
    began: float
    timeout: float
    log_name: str

    def wait(self) -> Graded:
        try:
            code = self.proc.wait(timeout=max(1.0, self.began + self.timeout - _now()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        return Graded(self.root, self.args, code, _now() - self.began, self.log_name)


def _now() -> float:
    return time.monotonic()


def start(
    root: Path,
    *args: str,
    timeout: float = TIMEOUT,
    log: str = "grade_all.log",
    env: dict | None = None,
) -> Running:
    """Start ``python -m grader grade ARGS`` in ``root``; ``env`` adds to or
    overrides the grading environment."""
    environ = {**environment(root), **(env or {})}
    with open(root / log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grader", "grade", *args],
            cwd=root,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Running(root, args, proc, _now(), timeout, log)


def grade(root: Path, *args: str, **kwargs) -> Graded:
    """Run the grading command in ``root`` to the end (see ``start``)."""
    return start(root, *args, **kwargs).wait()
