"""Autograding for the course's nbgrader assignments.

* ``check(assignment, check_name, framework)`` -- what a hidden test calls
  (``attncourse.grading.api``); failures raise ``GradingError`` whose message
  names the likely mistake and never shows reference values;
* ``attncourse.grading.visible`` -- small assertions for the visible tests;
* ``python -m attncourse.grading.references`` -- (re)generate the hidden
  reference data, cross-checked against the attncourse library;
* ``python -m attncourse.grading.release`` -- regenerate ``exercises/``;
* ``python -m attncourse.grading.grade_all`` -- grade every submission
  (generate, autograde, feedback, grades.csv) and check nothing leaks;
* ``attncourse.grading.hooks`` -- nbgrader hooks that keep the hidden data
  out of the release and the feedback.

Importing this package needs only NumPy; TensorFlow / PyTorch are imported
when a check runs code of that framework.
"""

from .api import check, judge, observe
from .errors import GradingError
from .tasks import ASSIGNMENTS

__all__ = ["ASSIGNMENTS", "GradingError", "check", "judge", "observe"]
